"""Making the runtime backend of a kind; the caller tells the user which one runs (`app.py`)."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.runtime.kind import RuntimeKind

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.description import Description
    from opencode_sandbox.runtime.docker.owner import RecordedHome


def describe(kind: RuntimeKind) -> Description:
    """What the backend of `kind` answers about itself, without making one."""
    if kind is RuntimeKind.DOCKER:
        from opencode_sandbox.runtime.docker.description import DESCRIPTION as DOCKER

        return DOCKER
    from opencode_sandbox.runtime.microsandbox.description import DESCRIPTION as MICROSANDBOX

    return MICROSANDBOX


def make_runtime(kind: RuntimeKind, recorded_home: RecordedHome | None = None, *,
                 one_command: bool = False) -> Runtime:
    """The backend of `kind`. It prints nothing: the docker runtime's notice is the caller's.
    `recorded_home` tells the docker runtime which objects of an older version, without an
    owner label, this host user's state folder records (`docker_owner`). `one_command`: the
    runtime serves one command, so the microsandbox backend, for which every look is an msb
    process, answers again from its last look until it changes the object itself; a watcher
    that must see what others change (the idle reaper) leaves it off."""
    if kind is RuntimeKind.DOCKER:
        return _docker(recorded_home)
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    return MicrosandboxRuntime(one_command=one_command)


def _docker(recorded_home: RecordedHome | None) -> Runtime:
    from opencode_sandbox.runtime.docker.backend import DockerRuntime
    from opencode_sandbox.runtime.docker.owner import DockerOwner

    return DockerRuntime(owner=DockerOwner(recorded_home=recorded_home))


def other_runtime(kind: RuntimeKind, recorded_home: RecordedHome | None = None) -> Runtime | None:
    """The runtime that is not `kind`, when it is installed here: pruning must see its VMs too
    (both run the runner images of the one Docker engine). No notice: nothing runs on it."""
    import shutil

    if kind is RuntimeKind.MICROSANDBOX:
        if shutil.which("docker") is None:
            return None
        return _docker(recorded_home)
    from opencode_sandbox.errors import RuntimeUnavailable
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
    from opencode_sandbox.runtime.microsandbox.cli import locate_msb

    try:
        locate_msb()
    except RuntimeUnavailable:
        return None
    return MicrosandboxRuntime()
