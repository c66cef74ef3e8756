"""Making the runtime backend of a kind; the caller tells the user which one runs (`app.py`)."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.runtime.kind import RuntimeKind

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime


def make_runtime(kind: RuntimeKind) -> Runtime:
    """The backend of `kind`. It prints nothing: the docker runtime's notice is the caller's."""
    if kind is RuntimeKind.DOCKER:
        from opencode_sandbox.runtime.docker_backend import DockerRuntime

        return DockerRuntime()
    from opencode_sandbox.runtime.microsandbox_backend import MicrosandboxRuntime

    return MicrosandboxRuntime()


def other_runtime(kind: RuntimeKind) -> Runtime | None:
    """The runtime that is not `kind`, when it is installed here: pruning must see its VMs too
    (both run the runner images of the one Docker engine). No notice: nothing runs on it."""
    import shutil

    if kind is RuntimeKind.MICROSANDBOX:
        if shutil.which("docker") is None:
            return None
        from opencode_sandbox.runtime.docker_backend import DockerRuntime

        return DockerRuntime()
    from opencode_sandbox.errors import RuntimeUnavailable
    from opencode_sandbox.runtime.microsandbox_backend import MicrosandboxRuntime
    from opencode_sandbox.runtime.msb_cli import locate_msb

    try:
        locate_msb()
    except RuntimeUnavailable:
        return None
    return MicrosandboxRuntime()
