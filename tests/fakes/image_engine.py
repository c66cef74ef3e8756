"""`FakeImageEngine`: an in-memory `ImageEngine` that behaves like the Docker adapter.

Images are inspect documents keyed by ID, with tags pointing at them, and a file tree each
(`files`: path to content). `build` reads a small Dockerfile (`FROM`, `COPY SRC DEST`,
`ENV NAME=VALUE`, `LABEL NAME=VALUE`) from the context folder; a context without a
Dockerfile fails, as Docker's does. A tag moved to a new image leaves the old one dangling.

Failure injection: `engine_down`, `pullable` (what `pull` can fetch).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

from opencode_sandbox.engine.types import BuildOutcome, ListedImage
from opencode_sandbox.errors import NotFound, RuntimeUnavailable, SandboxError


@dataclass
class FakeEngineImage:
    image_id: str
    labels: dict[str, str]
    env: dict[str, str]
    files: dict[str, bytes]
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def _with_tag(reference: str) -> str:
    return reference if ":" in reference.rsplit("/", 1)[-1] or "@" in reference else reference + ":latest"


class FakeImageEngine:
    def __init__(self) -> None:
        self.images: dict[str, FakeEngineImage] = {}
        self.tags: dict[str, str] = {}
        """`repository:tag` -> image ID."""
        self.pullable: dict[str, FakeEngineImage] = {}
        self.engine_down = False
        self.builds: list[str] = []
        """The tags of every build that ran."""
        self.calls: list[str] = []

    # seeding -------------------------------------------------------------------------------
    def add_image(self, reference: str, *, labels: Mapping[str, str] | None = None,
                  env: Mapping[str, str] | None = None, files: Mapping[str, bytes] | None = None) -> str:
        """Put an image under `reference` as if it had been built or pulled; its ID."""
        image = self._new_image(dict(labels or {}), dict(env or {}), dict(files or {}), seed=reference)
        self.tags[_with_tag(reference)] = image.image_id
        return image.image_id

    def _new_image(self, labels: dict[str, str], env: dict[str, str], files: dict[str, bytes],
                   seed: str) -> FakeEngineImage:
        digest = hashlib.sha256(json.dumps([seed, labels, env, sorted(files.items())], default=repr).encode())
        image = FakeEngineImage("sha256:" + digest.hexdigest(), labels, env, files)
        self.images.setdefault(image.image_id, image)
        return self.images[image.image_id]

    # the interface -------------------------------------------------------------------------
    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.engine_down:
            raise RuntimeUnavailable("the Docker engine is not answering", hint="start the engine")

    def _resolve(self, reference: str) -> FakeEngineImage | None:
        if reference in self.images:
            return self.images[reference]
        image_id = self.tags.get(_with_tag(reference))
        return self.images.get(image_id) if image_id else None

    def _document(self, image: FakeEngineImage) -> dict[str, Any]:
        return {
            "Id": image.image_id,
            "RepoTags": sorted(tag for tag, image_id in self.tags.items() if image_id == image.image_id),
            "Created": image.created_at.isoformat(),
            "Config": {"Labels": dict(image.labels) or None, "Env": [f"{k}={v}" for k, v in image.env.items()]},
        }

    def engine_version(self, timeout_s: float = 15.0) -> str:
        self._call("engine_version")
        return "fake"

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        self._call("inspect_image")
        image = self._resolve(reference)
        return self._document(image) if image is not None else None

    def inspect_images(self, references: Sequence[str]) -> dict[str, dict[str, Any]]:
        self._call("inspect_images")
        found = {reference: self._resolve(reference) for reference in references}
        return {reference: self._document(image) for reference, image in found.items() if image is not None}

    def pull(self, reference: str) -> None:
        self._call("pull")
        if self._resolve(reference) is not None:
            return
        image = self.pullable.get(reference)
        if image is None:
            raise SandboxError(f"cannot pull the base image {reference}: not found", hint="check the image name")
        self.images[image.image_id] = image
        self.tags[_with_tag(reference)] = image.image_id

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
        self._call("build")
        self.builds.append(tag)
        dockerfile = context_dir / "Dockerfile"
        if not dockerfile.is_file():
            on_line("ERROR: failed to read dockerfile: open Dockerfile: no such file or directory")
            return BuildOutcome(1, None)
        steps = [line.strip() for line in dockerfile.read_text().splitlines() if line.strip()]
        steps = [line for line in steps if not line.startswith("#")]
        files: dict[str, bytes] = {}
        env: dict[str, str] = {}
        image_labels: dict[str, str] = {}
        for number, step in enumerate(steps, 1):
            on_line(f"#{number} [{number}/{len(steps)}] {step}")
            instruction, _, rest = step.partition(" ")
            if instruction == "FROM":
                base = self._resolve(rest.split()[0])
                if base is None:
                    on_line(f"ERROR: {rest}: not found")
                    return BuildOutcome(1, None)
                files, env, image_labels = dict(base.files), dict(base.env), dict(base.labels)
            elif instruction == "COPY":
                source, destination = rest.split()
                files.update(_copied(context_dir / source, PurePosixPath(destination)))
            elif instruction in ("ENV", "LABEL"):
                name, _, value = rest.partition("=")
                (env if instruction == "ENV" else image_labels)[name] = value.strip('"')
        image_labels.update(labels)
        seed = json.dumps([dockerfile.read_text(), dict(build_args)])
        image = self._new_image(image_labels, env, files, seed)
        self.tags[_with_tag(tag)] = image.image_id
        on_line(f"#{len(steps) + 1} writing image {image.image_id} done")
        return BuildOutcome(0, image.image_id)

    def tag(self, source: str, target: str) -> None:
        self._call("tag")
        image = self._resolve(source)
        if image is None:
            raise NotFound(f"image {source} is not in the Docker engine", hint="run `opencode-sandbox build`")
        self.tags[_with_tag(target)] = image.image_id

    def remove_image(self, name: str) -> None:
        self._call("remove_image")
        if name in self.images:
            tagged = [tag for tag, image_id in self.tags.items() if image_id == name]
            if len(tagged) > 1:
                raise SandboxError(f"cannot remove docker image {name}: it is referenced by several tags",
                                   hint="remove the containers that use it first")
            for tag in tagged:
                del self.tags[tag]
            del self.images[name]
            return
        image_id = self.tags.pop(_with_tag(name), None)
        if image_id is None:
            raise NotFound(f"docker image {name} does not exist", hint="nothing to do")
        if image_id not in self.tags.values():
            del self.images[image_id]

    def list_images(self, labels: Mapping[str, str], include_tagged: bool) -> list[ListedImage]:
        self._call("list_images")
        listed: list[ListedImage] = []
        for image in self.images.values():
            if not labels.items() <= image.labels.items():
                continue
            tags = sorted(tag for tag, image_id in self.tags.items() if image_id == image.image_id)
            if not tags:
                listed.append(ListedImage(image.image_id, None, image.created_at))
            elif include_tagged:
                listed += [ListedImage(image.image_id, tag, image.created_at) for tag in tags]
        return listed

    @contextmanager
    def save(self, reference: str) -> Iterator[IO[bytes]]:
        self._call("save")
        image = self._resolve(reference)
        if image is None:
            raise NotFound(f"image {reference} is not in the Docker engine", hint="run `opencode-sandbox build`")
        manifest = json.dumps([{"Config": image.image_id.removeprefix("sha256:") + ".json",
                                "RepoTags": [_with_tag(reference)], "Layers": []}]).encode()
        yield _tar({"manifest.json": manifest})

    @contextmanager
    def export_path(self, image: str, path: str) -> Iterator[IO[bytes]]:
        self._call("export_path")
        found = self._resolve(image)
        if found is None:
            raise NotFound(f"image {image} is not in the Docker engine", hint="run `opencode-sandbox build`")
        folder = PurePosixPath(path)
        entries = {
            (PurePosixPath(folder.name) / PurePosixPath(name).relative_to(folder)).as_posix(): content
            for name, content in found.files.items()
            if PurePosixPath(name).is_relative_to(folder)
        }
        if not entries:
            raise SandboxError(f"cannot copy {path} out of image {image}: no such file", hint="check the path")
        yield _tar(entries, folder=folder.name)


def _copied(source: Path, destination: PurePosixPath) -> dict[str, bytes]:
    if source.is_file():
        return {destination.as_posix(): source.read_bytes()}
    return {(destination / path.relative_to(source).as_posix()).as_posix(): path.read_bytes()
            for path in sorted(source.rglob("*")) if path.is_file()}


def _tar(files: Mapping[str, bytes], folder: str | None = None) -> IO[bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        if folder is not None:
            entry = tarfile.TarInfo(folder)
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(entry)
        for name, content in sorted(files.items()):
            entry = tarfile.TarInfo(name)
            entry.size, entry.mode = len(content), 0o644
            archive.addfile(entry, io.BytesIO(content))
    buffer.seek(0)
    return buffer
