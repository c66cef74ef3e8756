"""`list`, `volume list` and `image list`: ask the runtime once (`image list`: the Docker engine
too), render a table or JSON.

Tables show local time; JSON carries UTC timestamps in ISO 8601 and sizes in bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, SandboxStatus

if TYPE_CHECKING:
    from opencode_sandbox.app import App


def select_sandboxes(runtime: Runtime, running: bool, stopped: bool) -> list[SandboxInfo]:
    if running and stopped:
        raise UsageError("--running and --stopped exclude each other", hint="use one of them, or neither for all")
    sandboxes = sorted(runtime.list_sandboxes(), key=lambda info: info.name)
    if running:
        return [info for info in sandboxes if info.status is SandboxStatus.RUNNING]
    if stopped:
        return [info for info in sandboxes if info.status is not SandboxStatus.RUNNING]
    return sandboxes








def agent_sessions(app: App, sandboxes: Sequence[SandboxInfo]) -> dict[str, bool | None]:
    """For each running VM of a terminal agent: whether the agent's session runs (None when the VM
    could not tell). opencode's sessions live in its server, and a stopped VM runs none."""
    from opencode_sandbox.core.agents import PROFILES, SessionKind, agent_in_labels

    sessions: dict[str, bool | None] = {}
    for info in sandboxes:
        built_in = PROFILES.get(agent_in_labels(info.labels))
        # A name no built-in profile has is an agent of a user's own: a terminal agent.
        session = built_in.session if built_in is not None else SessionKind.TERMINAL
        if info.status is not SandboxStatus.RUNNING or session is SessionKind.SERVER:
            continue
        try:
            sessions[info.name] = app.guest(info.name).agent_report().session_running
        except SandboxError:
            sessions[info.name] = None
    return sessions


class RunnerImage(Record):
    image: ImageInfo
    loaded: bool
    """Whether the VM runtime can run this very image (reference and digest) now."""


def list_runner_images(app: App) -> list[RunnerImage]:
    """This tool's images in the Docker engine, where `build` makes them, and those only the
    VM runtime still holds. The docker runtime runs the engine's images as they are."""
    runtime = app.runtime
    if runtime.description.runs_engine_images:
        return runner_images(runtime.list_images(), None)
    loaded = runtime.list_images()
    built: list[ImageInfo] = []
    engine = app.other_runtime
    if engine is not None:
        try:
            built = engine.list_images()
        except SandboxError as error:
            app.console.warn(f"the images built in the Docker engine are left out: {error.message}")
    return runner_images(built, loaded)


def runner_images(built: Sequence[ImageInfo], loaded: Sequence[ImageInfo] | None) -> list[RunnerImage]:
    """One row per image: each one built, loaded or not, then each one only the runtime holds.
    `loaded` is None when the runtime runs the built images themselves."""
    if loaded is None:
        rows = [RunnerImage(info, True) for info in built]
    else:
        held = {_identity(info) for info in loaded}
        in_engine = {_identity(info) for info in built}
        rows = [RunnerImage(info, _identity(info) in held) for info in built]
        rows += [RunnerImage(info, True) for info in loaded if _identity(info) not in in_engine]
    return sorted(rows, key=lambda row: (row.image.reference, row.image.digest))


def _identity(info: ImageInfo) -> tuple[str, str]:
    return info.reference.removeprefix("docker.io/"), info.digest








