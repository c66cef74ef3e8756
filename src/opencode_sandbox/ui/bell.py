"""The terminal's bell, rung by writing BEL to the process's controlling terminal."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable


def terminal_bell() -> Callable[[], None] | None:
    """What rings this process's terminal; None without one."""
    try:
        descriptor = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None

    def ring() -> None:
        with contextlib.suppress(OSError):
            os.write(descriptor, b"\a")

    return ring
