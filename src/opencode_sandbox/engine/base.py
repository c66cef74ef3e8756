"""The interface of the engine that builds and holds the runner images, beside the `Runtime`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any, Protocol

from opencode_sandbox.engine.types import BuildOutcome, ListedImage


class ImageEngine(Protocol):
    """Where images are built and kept (Docker).

    Errors are `opencode_sandbox.errors` types: `RuntimeUnavailable` when the engine or its
    command is missing or stops answering, `NotFound` for a missing image, `SandboxError`
    (with a hint) for any other refusal."""

    def engine_version(self, timeout_s: float = 15.0) -> str:
        """The engine's version; `RuntimeUnavailable` naming the reason when it cannot answer."""

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        """The image's inspect document (as `docker image inspect` prints it), or None."""

    def inspect_images(self, references: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The documents of several references at once; missing ones are left out."""

    def pull(self, reference: str) -> None:
        """Fetch `reference` from its registry; `SandboxError` when it cannot."""

    def build(
        self,
        context_dir: Path,
        *,
        tag: str,
        labels: Mapping[str, str],
        build_args: Mapping[str, str],
        no_cache: bool,
        on_line: Callable[[str], None],
    ) -> BuildOutcome:
        """Build `context_dir` (holding its `Dockerfile`) as `tag`, handing over each log line.

        A failed build returns a non-zero exit code and no image ID, and leaves `tag` as it was."""

    def tag(self, source: str, target: str) -> None:
        """Give the image `source` the additional name `target`."""

    def remove_image(self, name: str) -> None:
        """Remove a tag, or an untagged image by ID; never forced. `NotFound` when it is gone."""

    def list_images(self, labels: Mapping[str, str], include_tagged: bool) -> list[ListedImage]:
        """Images carrying all of `labels`: the dangling ones, and with `include_tagged` every tag too."""

    def save(self, reference: str) -> AbstractContextManager[IO[bytes]]:
        """The image as a `docker save` archive (tar), streamed; a failure raises on leaving."""

    def export_path(self, image: str, path: str) -> AbstractContextManager[IO[bytes]]:
        """The folder `path` of `image` as a tar stream whose entries start with the folder's
        own name; `NotFound` for a missing image, a failure raises on leaving."""
