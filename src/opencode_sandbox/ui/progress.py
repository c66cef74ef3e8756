"""Progress for the slow steps: a spinner on a terminal, one line otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opencode_sandbox.ui.console import Console, LogLevel


@contextmanager
def slow_step(console: Console, message: str) -> Iterator[None]:
    """Show `message` while the step runs; silent at the quiet level."""
    if console.level < LogLevel.INFO:
        yield
        return
    if not console.stream.isatty():
        console.info(message + "...")
        yield
        return
    from typing import IO, cast

    from rich.console import Console as RichConsole

    with RichConsole(file=cast("IO[str]", console.stream)).status(message + "...", spinner="dots"):
        yield
