"""The process's standard streams, as the console writes to them."""

from __future__ import annotations

import io
import sys

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.ui.console import Console, LogLevel

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO


class StandardStream(io.TextIOBase):
    """`sys.stdout` or `sys.stderr` as it is when written to: click's test runner, and a caller
    that redirects them, swap the object after the console was made."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def _current(self) -> TextIO:
        stream: TextIO = getattr(sys, self._name)
        return stream

    def write(self, text: str) -> int:
        return self._current.write(text)

    def flush(self) -> None:
        self._current.flush()

    def isatty(self) -> bool:
        return self._current.isatty()

    def fileno(self) -> int:
        return self._current.fileno()


class TerminalAsker:
    """Questions on standard error, answers from the terminal (click's prompts)."""

    def choose(self, question: str, choices: Sequence[str], default: str) -> str:
        import click

        answer: str = click.prompt(question, type=click.Choice(list(choices)), default=default, show_choices=True,
                                   err=True)
        return answer

    def confirm(self, question: str, default: bool) -> bool:
        import click

        return click.confirm(question, default=default, err=True)


def terminal_console(level: LogLevel = LogLevel.INFO) -> Console:
    """The console of a command: messages on standard error, results on standard output,
    questions on the terminal."""
    return Console(level, stream=StandardStream("stderr"), out=StandardStream("stdout"), asker=TerminalAsker())
