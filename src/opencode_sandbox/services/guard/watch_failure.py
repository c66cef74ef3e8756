"""The watch over a running VM fails closed: when the idle reaper cannot look at what the VM
changes (a round failed twice, took too long, or the reaper died), the VM is stopped at once and
the reason is kept here until the next start, detach or stop tells it."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from opencode_sandbox.core.guard import shown
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import ProjectLayout


class WatchFailed(Exception):
    """The watch cannot do its job; the VM must stop."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def record(project: ProjectLayout, reason: str) -> None:
    write_yaml(project.watch_failed, {"at": datetime.now(UTC).isoformat(timespec="seconds"), "reason": reason})


def take(project: ProjectLayout) -> str | None:
    """The line that tells the last failure, once: the record is removed."""
    try:
        data = read_yaml_mapping(project.watch_failed)
    except UnreadableState:
        data = {"reason": "its record is unreadable"}
    if data is None:
        return None
    with contextlib.suppress(FileNotFoundError):
        project.watch_failed.unlink()
    at, reason = data.get("at"), data.get("reason")
    when = f" at {at}" if isinstance(at, str) else ""
    return (f"the VM was stopped{when} because the guard's watch could not do its job: "
            f"{shown(reason) if isinstance(reason, str) else 'no reason was recorded'}")
