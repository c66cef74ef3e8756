"""Which start of a container the docker runtime's network rules were installed for.

The rules live in a network namespace, which every start of the container that owns it makes
anew: that of a VM's network holder, or, for a VM made by an earlier version, the VM's own. A
holder started outside the tool (`docker start`, the engine's own restart) holds no rules.
Docker keeps no mutable field on a container, so the start the rules were installed for (its
`State.StartedAt`) is written down here, in the user's state folder, under the container's name;
a start that finds another `StartedAt` installs the rules again before the VM runs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.state_layout import StateLayout


def _mark(name: str) -> Path:
    return StateLayout(ToolPaths.from_environment().state_dir).policy_marks / name


def record(name: str, started_at: str) -> None:
    mark = _mark(name)
    mark.parent.mkdir(parents=True, exist_ok=True)
    partial = mark.with_name(f".{mark.name}.{os.getpid()}")
    partial.write_text(started_at)
    partial.replace(mark)


def installed_for(name: str, started_at: str) -> bool:
    try:
        return _mark(name).read_text() == started_at
    except OSError:
        return False


def forget(name: str) -> None:
    with contextlib.suppress(OSError):
        _mark(name).unlink()
