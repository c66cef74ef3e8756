"""The one interface the services use to drive a VM runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.prune_plan import ArtifactKind, PolicyPieceFact
from opencode_sandbox.runtime.types import (
    EXEC_OUTPUT_LIMIT,
    ExecResult,
    ImageInfo,
    Refusal,
    RuntimeKind,
    SandboxInfo,
    SandboxSpec,
    VolumeInfo,
)

if TYPE_CHECKING:
    from opencode_sandbox.runtime.description import Description


class Runtime(Protocol):
    """A VM runtime. Lists return only this tool's artifacts (our name prefix *and* labels).

    Errors are `opencode_sandbox.errors` types: `RuntimeUnavailable` when the engine is
    missing or stops answering, `NotFound` for a missing sandbox/volume/image, `NotOurs` for
    a name that exists but lacks our labels, `BootFailed` when a sandbox cannot start (and
    no record is left behind by `create_sandbox`): its subclass `VmDidNotBoot` when the VM
    itself did not come up, which another attempt may not repeat, and `BootFailed` itself
    when another attempt cannot help (a missing image or folder). On a runtime whose objects
    every host user shares (docker), what it makes carries its host user's owner label, lists
    leave out another user's sandboxes and volumes, and every other call on one raises
    `OwnedByAnother`; `SandboxInfo.owner_unlabelled` marks a sandbox of this user that an older
    version made without that label.
    """

    kind: RuntimeKind

    @property
    def description(self) -> Description:
        """What it answers about itself: the services' questions, so they never branch on its kind."""

    def check_available(self) -> None:
        """Raise `RuntimeUnavailable` (with a hint) unless sandboxes can be run."""

    # sandboxes
    def get_sandbox(self, name: str) -> SandboxInfo | None: ...
    def list_sandboxes(self) -> list[SandboxInfo]: ...
    def sandbox_images(self) -> dict[str, str]:
        """The image of every sandbox this runtime holds, this tool's or not, by sandbox name:
        the reference it was created from, or the image's ID once that reference has moved on."""
    def create_sandbox(self, spec: SandboxSpec, *, secret_values: Mapping[str, str] | None = None) -> SandboxInfo:
        """Create and boot detached; on failure remove what was created and raise.

        `secret_values` holds the value of each secret of `spec.network` (the VM never sees them);
        a missing one, or a runtime that cannot keep secrets, is a `UsageError` before anything
        is created."""
    def start_sandbox(self, name: str, *, secret_values: Mapping[str, str] | None = None) -> None:
        """Start a stopped sandbox; `secret_values` as for `create_sandbox`, read again at every start."""
    def stop_sandbox(self, name: str, timeout_s: float = 10.0) -> None:
        """Graceful stop with writes flushed; a stopped sandbox is left as it is."""
    def kill_sandbox(self, name: str) -> None: ...
    def remove_sandbox(self, name: str) -> None:
        """Remove a stopped sandbox (stopping it first if needed); volumes are kept."""
    def host_port(self, name: str, guest_port: int) -> int:
        """The 127.0.0.1 port on the host that a published guest port is reachable on."""
    def port_map(self, name: str) -> dict[int, int]:
        """Every published guest TCP port of a running sandbox and the 127.0.0.1 port it is
        reachable on; empty while it is stopped."""
    def refusals(self, name: str) -> list[Refusal]:
        """What the sandbox's network policy refused recently; empty while it is stopped (the
        record goes with each run). `UsageError` where the runtime cannot tell."""

    # processes
    def exec(
        self,
        name: str,
        argv: Sequence[str],
        *,
        user: str = "dev",
        workdir: str = "/workspace",
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        output_limit: int = EXEC_OUTPUT_LIMIT,
    ) -> ExecResult:
        """Run to the end and return both streams; `SandboxError` (`too_much_output`) when one
        passes `output_limit` bytes, the rest left unread."""
    def attach(
        self,
        name: str,
        argv: Sequence[str],
        *,
        user: str = "dev",
        workdir: str = "/workspace",
        env: Mapping[str, str] | None = None,
        tty: bool = True,
        clipboard: bool = False,
    ) -> int:
        """Run interactively on the user's terminal (resize, signals); return the exit code. On a
        terminal, what the VM draws passes `core/screen_filter.py` (`clipboard`: OSC 52 writes too)."""

    def prepare_command(
        self, name: str, argv: Sequence[str], *, user: str = "dev", workdir: str = "/workspace",
    ) -> PreparedCommand | None:
        """`argv` made ready to run in the running VM `name` without a terminal, unstarted until
        `run`; None where this runtime cannot (or the VM does not run): `attach` runs it then."""

    # volumes
    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo: ...
    def get_volume(self, name: str) -> VolumeInfo | None: ...
    def list_volumes(self) -> list[VolumeInfo]: ...
    def remove_volume(self, name: str) -> None: ...
    def fill_volume_from_image(self, volume: str, image: str, path: str = "/home/dev") -> None:
        """Copy the image's `path` into an empty volume, keeping owners, modes, symlinks."""
    def copy_volume(self, source: str, target: str) -> None:
        """Copy every file of `source` on top of `target`, keeping owners, modes, symlinks."""

    # images
    def loaded_image(self, docker_reference: str) -> ImageInfo | None:
        """The Docker engine image as this runtime runs it, or None while it needs `load_image`
        (not loaded here, or loaded with another digest). `NotFound` when the engine lacks it."""
    def load_image(self, docker_reference: str) -> ImageInfo:
        """Make a Docker engine image runnable here; skip when the same digest is loaded."""
    def list_images(self) -> list[ImageInfo]: ...
    def remove_image(self, reference: str) -> None: ...


class PreparedCommand(Protocol):
    """A command made ready in a running VM, started by nothing in it: `run` starts it, or `end`
    drops it unstarted. One of the two, once."""

    def run(self) -> int:
        """Start it and stream it on our fds 0, 1 and 2 as `attach(tty=False)` does; the exit code."""
    def end(self) -> None:
        """Drop it unstarted; after `run`, nothing."""


@runtime_checkable
class KeepsPolicyPieces(Protocol):
    """A runtime that keeps pieces beside a VM for its network policy (the docker runtime: the
    egress proxy, its CA volume, the project's network). Removing the VM removes them; pruning
    finds those of a VM removed another way."""

    def list_policy_pieces(self) -> list[PolicyPieceFact]: ...
    def remove_policy_piece(self, kind: ArtifactKind, name: str) -> None:
        """`NotFound` when it is gone; `SandboxError` when it is not this tool's or still in use."""
