"""Messages by log level, and the results of a command; plain text, colour only on a terminal
without NO_COLOR. The console writes to the streams the command line gives it (`cli/terminal.py`):
no module below `cli/` chooses a stream of its own."""

from __future__ import annotations

import os
from enum import IntEnum

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard import terminal_text

if TYPE_CHECKING:  # the warm path loads no `typing`
    from typing import Protocol

    from opencode_sandbox.ui.prompts import Asker

    class Stream(Protocol):
        """Where the console writes: a text stream, or what stands for one."""

        def write(self, text: str, /) -> int: ...
        def flush(self) -> None: ...
        def isatty(self) -> bool: ...


class LogLevel(IntEnum):
    ERROR = 0
    WARNING = 1
    INFO = 2
    VERBOSE = 3


LOG_LEVEL_NAMES = [level.name.lower() for level in LogLevel]


def color_enabled(stream: Stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    return stream.isatty()


_STYLES = {"red": "31", "green": "32", "yellow": "33", "dim": "2", "bold": "1", "cyan": "36"}


def style(text: str, name: str, stream: Stream) -> str:
    if not color_enabled(stream):
        return text
    return f"\x1b[{_STYLES[name]}m{text}\x1b[0m"


class Console:
    """Where every user-facing message goes; one per process."""

    def __init__(self, level: LogLevel = LogLevel.INFO, *, stream: Stream, out: Stream | None = None,
                 asker: Asker | None = None) -> None:
        """`stream`: where messages go (standard error); `out`: where results go (standard
        output), `stream` when not given; `asker`: who answers a question (`ui/prompts.py`),
        none: its default answer is taken."""
        self.level = level
        self.stream = stream
        self.out = out or stream
        self.asker = asker
        self._said: set[str] = set()

    @property
    def verbose_enabled(self) -> bool:
        return self.level >= LogLevel.VERBOSE

    def _emit(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def result(self, text: str) -> None:
        """A line of the command's result, on its own stream whatever the log level."""
        self.out.write(text + "\n")
        self.out.flush()

    def error(self, message: str, hint: str | None = None) -> None:
        self._emit(style("error:", "red", self.stream) + " " + terminal_text(message))
        if hint:
            self._emit(style("hint:", "cyan", self.stream) + " " + terminal_text(hint))

    def warn(self, message: str, hint: str | None = None) -> None:
        if self.level >= LogLevel.WARNING:
            self._emit(style("warning:", "yellow", self.stream) + " " + terminal_text(message))
            if hint:
                self._emit(style("hint:", "cyan", self.stream) + " " + terminal_text(hint))

    def warn_once(self, message: str) -> None:
        """A notice printed at most once per process, at the warning level, without prefix."""
        if message not in self._said and self.level >= LogLevel.WARNING:
            self._said.add(message)
            self._emit(style(terminal_text(message), "yellow", self.stream))

    def note(self, message: str) -> None:
        """A line that belongs to the warning before it: shown at the warning level, without prefix."""
        if self.level >= LogLevel.WARNING:
            self._emit(terminal_text(message))

    def info(self, message: str) -> None:
        if self.level >= LogLevel.INFO:
            self._emit(terminal_text(message))

    def verbose(self, message: str) -> None:
        if self.level >= LogLevel.VERBOSE:
            self._emit(style(terminal_text(message), "dim", self.stream))
