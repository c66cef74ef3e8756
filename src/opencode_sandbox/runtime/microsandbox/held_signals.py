"""Signals held back while a child process starts, and acted on once it has."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ENDING_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


@contextmanager
def signals_held(numbers: tuple[int, ...] = ENDING_SIGNALS) -> Iterator[None]:
    """The `numbers` that arrive inside the block are raised again, to the handlers the caller had,
    when it ends: a Ctrl-C that lands while `subprocess.Popen` waits for its child's exec would
    otherwise interrupt it and leave the child running with no one to end it. Signals the caller
    ignores stay ignored; only the main thread can hold them (elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {number: signal.getsignal(number) for number in numbers}
    for number, handler in previous.items():
        if handler != signal.SIG_IGN:
            signal.signal(number, lambda received, _frame: arrived.append(received))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        for number in dict.fromkeys(arrived):
            signal.raise_signal(number)
