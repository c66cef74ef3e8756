"""The VM runtimes; kept apart so configuration loads without the runtime types."""

from __future__ import annotations

from enum import StrEnum


class RuntimeKind(StrEnum):
    MICROSANDBOX = "microsandbox"
    DOCKER = "docker"


DEFAULT = RuntimeKind.MICROSANDBOX
"""The microVM is the point of the tool: the runtime wherever the configuration names none."""

_SHARES_HOST_KERNEL = frozenset({RuntimeKind.DOCKER})


def shares_host_kernel(kind: RuntimeKind) -> bool:
    """Its VM is a container on the host's kernel, a weaker isolation than a microVM's own kernel."""
    return kind in _SHARES_HOST_KERNEL
