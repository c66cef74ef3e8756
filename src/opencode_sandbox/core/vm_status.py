"""The states a VM can be in, as every runtime reports them and the lifecycle decides on them."""

from __future__ import annotations

from enum import StrEnum


class SandboxStatus(StrEnum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"
    CRASHED = "crashed"
    DRAINING = "draining"
    PAUSED = "paused"
    UNKNOWN = "unknown"

    @property
    def is_active(self) -> bool:
        """Running or on its way there: never removed, never judged stale."""
        return self in (SandboxStatus.RUNNING, SandboxStatus.STARTING, SandboxStatus.DRAINING)
