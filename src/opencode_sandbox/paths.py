"""The folders this tool keeps its files in, following the XDG base directories."""

from __future__ import annotations

import os
from pathlib import Path

from opencode_sandbox.core.naming import TOOL
from opencode_sandbox.core.records import Record


def _xdg(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


class ToolPaths(Record):
    config_dir: Path
    state_dir: Path
    cache_dir: Path

    @classmethod
    def from_environment(cls) -> ToolPaths:
        return cls(
            config_dir=_xdg("XDG_CONFIG_HOME", ".config") / TOOL,
            state_dir=_xdg("XDG_STATE_HOME", ".local/state") / TOOL,
            cache_dir=_xdg("XDG_CACHE_HOME", ".cache") / TOOL,
        )
