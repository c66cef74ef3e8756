"""How much of the VM's objects one project's host repository takes in a day.

Each sync reads a bounded bundle, but a VM that makes new objects all day long would grow the
host's `.git` without end (git keeps what a ref once pointed at until it is collected). Past the
quota the sync brings nothing more until the day's first bundles age out, and says why."""

from __future__ import annotations

import time
from pathlib import Path

from opencode_sandbox.services.git_sync.host_git import GitSyncError
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import ProjectLayout

DAILY_BYTES = 2 << 30
DAY_S = 24 * 3600.0


def _taken(path: Path, now: float) -> list[list[float]]:
    try:
        data = read_yaml_mapping(path) or {}
    except UnreadableState:
        data = {}
    entries = data.get("taken")
    if not isinstance(entries, list):
        return []
    return [[float(when), float(size)] for when, size in (each for each in entries
                                                          if isinstance(each, list) and len(each) == 2)
            if now - float(when) < DAY_S]


def take(project_dir: Path, size: int, now: float | None = None) -> None:
    """Count `size` bytes of the VM's objects against the day's quota; `GitSyncError` past it."""
    now = time.time() if now is None else now
    path = ProjectLayout(project_dir).incoming_bytes
    taken = _taken(path, now)
    used = sum(size for _, size in taken)
    if used + size > DAILY_BYTES:
        raise GitSyncError(f"the VM sent {used / (1 << 20):.0f} MiB of git objects in the last 24 hours, and "
                           f"{size / (1 << 20):.0f} MiB more would pass the {DAILY_BYTES >> 30} GiB a day the "
                           "host takes: its work stays in the VM until then")
    write_yaml(path, {"taken": [*taken, [now, float(size)]]})
