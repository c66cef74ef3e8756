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
