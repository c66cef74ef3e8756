"""Plain-text tables: left-aligned columns, two spaces apart; colour only on a terminal."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import TextIO

from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.records import Record

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

_CODES = {"green": "32", "yellow": "33", "red": "31", "dim": "2"}
STATUS_COLORS = {
    "running": "green",
    "stopped": "dim",
    "created": "dim",
    "starting": "yellow",
    "paused": "yellow",
    "draining": "yellow",
    "crashed": "red",
}


class Cell(Record):
    text: str
    color: str | None = None


def wants_color(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def status_cell(status: str) -> Cell:
    return Cell(status, STATUS_COLORS.get(status))


def local_time(moment: datetime | None) -> str:
    """`YYYY-MM-DD HH:MM:SS` in the local time zone, `-` when unknown."""
    return moment.astimezone().strftime(TIME_FORMAT) if moment is not None else "-"


def render(headers: Sequence[str], rows: Sequence[Sequence[str | Cell]], color: bool) -> str:
    # What a table shows may come from the VM (a name, a host it asked for): nothing in it acts on the terminal.
    cells = [[Cell(shown(cell.text), cell.color) if isinstance(cell, Cell) else Cell(shown(cell)) for cell in row]
             for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell.text))
    lines = [_line([Cell(header) for header in headers], widths, color)]
    lines += [_line(row, widths, color) for row in cells]
    return "\n".join(lines)


def _line(row: Sequence[Cell], widths: Sequence[int], color: bool) -> str:
    parts = []
    last = len(row) - 1
    for index, cell in enumerate(row):
        padding = "" if index == last else " " * (widths[index] - len(cell.text))
        text = cell.text
        if color and cell.color:
            text = f"\x1b[{_CODES[cell.color]}m{text}\x1b[0m"
        parts.append(text + padding)
    return "  ".join(parts)
