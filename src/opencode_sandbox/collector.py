"""The cyclic garbage collector, switched back on where a process may live for hours.

The launcher switches it off (`launcher.py`): a short command makes next to no cyclic garbage.
A process that stays (an attached client, `run --serve-only`'s wait, the idle reaper) makes
some on every exchange with the daemon or the engine, and would grow without bound.
"""

from __future__ import annotations

import gc


def collect_from_now_on() -> None:
    """Collect cyclic garbage again, without ever scanning what the process has loaded so far.

    The modules, classes and functions loaded until now live as long as the process; frozen,
    they stay out of every collection, which then looks at the new objects only.
    """
    gc.freeze()
    gc.enable()
