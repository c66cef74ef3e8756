"""Booting the project's VM: once more when the VM itself did not come up, and when it fails for
good, removing what this run made for it (never what existed before)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.errors import NotFound, NotOurs, SandboxError, VmDidNotBoot
from opencode_sandbox.ui.progress import slow_step

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.types import SandboxSpec
    from opencode_sandbox.ui.console import Console


def create(runtime: Runtime, console: Console, spec: SandboxSpec,
           secret_values: Mapping[str, str] | None = None) -> None:
    """Create and boot the VM, which did not exist; when that fails for good, remove what is
    left of it (the caller removes a home volume it made for it)."""

    def boot() -> None:
        runtime.create_sandbox(spec, secret_values=secret_values)

    def again() -> None:
        _remove_vm(runtime, console, spec.name)  # a runtime that left a record behind
        boot()

    try:
        _twice(console, f"Creating {spec.name}", boot, again)
    except BaseException:
        _remove_vm(runtime, console, spec.name)
        raise


def start(runtime: Runtime, console: Console, name: str, secret_values: Mapping[str, str] | None = None) -> None:
    """Start the stopped VM; it stays, whatever happens: it existed before this run."""

    def boot() -> None:
        runtime.start_sandbox(name, secret_values=secret_values)

    _twice(console, f"Starting {name}", boot, boot)


def remove_made_volume(runtime: Runtime, console: Console, volume: str) -> None:
    """Remove a home volume this run created, after a failure: no VM uses it yet."""
    try:
        runtime.remove_volume(volume)
    except NotFound:
        pass
    except SandboxError as failure:
        remove = runtime.description.volume_remove_command
        console.warn(f"the home volume {volume} made for this run is left behind: {failure.message} "
                     f"(remove it with `{remove} {volume}`)")


def _twice(console: Console, step: str, first: Callable[[], object], second: Callable[[], object]) -> None:
    try:
        with slow_step(console, step):
            first()
    except VmDidNotBoot as failure:
        console.warn(f"the VM did not boot ({failure.cause}); trying once more")
        with slow_step(console, step):
            second()


def _remove_vm(runtime: Runtime, console: Console, name: str) -> None:
    try:
        if runtime.get_sandbox(name) is not None:
            runtime.remove_sandbox(name)
    except (NotFound, NotOurs):
        pass  # gone, or never this run's
    except SandboxError as failure:
        console.warn(f"the half-made VM {name} is left behind: {failure.message} "
                     "(`opencode-sandbox stop -f` removes it)")
