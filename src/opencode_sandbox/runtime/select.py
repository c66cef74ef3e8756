"""Choosing the runtime backend: never silently, and docker always with its notice."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.ui.console import Console

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime

DOCKER_NOTICE = (
    "notice: using the docker runtime: the sandbox is a container that shares the host's "
    "kernel, a weaker isolation than a microVM"
)


def make_runtime(kind: RuntimeKind, console: Console) -> Runtime:
    if kind is RuntimeKind.DOCKER:
        from opencode_sandbox.runtime.docker_backend import DockerRuntime

        console.warn_once(DOCKER_NOTICE)
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
