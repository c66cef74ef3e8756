"""The few lines of msb's log for a sandbox that say why its VM did not boot.

`msb logs --source system NAME` merges msb's own diagnostics (`LEVEL target: text`) with the
guest kernel's console. msb forgets both when the sandbox is removed, so they are read first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_LINES = 4
MAX_WIDTH = 200
_RUNTIME_LEVEL = re.compile(r"^\s*(ERROR|WARN)\s")
_KERNEL_SIGNS = re.compile(r"panic|not syncing|out of memory|oom-kill|killed process|segfault|call trace",
                           re.IGNORECASE)
"""Only what stops a guest: every boot logs harmless failures too (`rtc_cmos ... failed`)."""
_BOOT_START = re.compile(r"\bsandbox starting\b")
_RUST_PANIC = re.compile(r"^thread '.*' .*panicked at ")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_KERNEL_TIME = re.compile(r"^\[\s*\d+\.\d+\]\s*")
_MAY_HOLD_VALUES = re.compile(r"command line|cmdline|environ", re.IGNORECASE)
"""The guest kernel prints its command line, which can carry the VM's environment."""


def decisive_lines(log: str, hidden: Iterable[str] = ()) -> list[str]:
    """The last few error lines of msb and the guest kernel during the last boot, short, in
    their order.

    A line holding any of the `hidden` values (the VM's environment) is left out whole.
    """
    secrets = [value for value in hidden if len(value) >= 4]
    lines = log.splitlines()
    starts = [number for number, line in enumerate(lines) if _BOOT_START.search(line)]
    picked: list[str] = []
    panicked = False
    for raw in lines[starts[-1] if starts else 0 :]:  # the log keeps every earlier boot too
        line = _COLOUR.sub("", raw).strip()
        if not line or _MAY_HOLD_VALUES.search(line) or any(secret in line for secret in secrets):
            continue
        if panicked:  # the line after Rust's "thread 'main' panicked at FILE:LINE:" says why
            picked.append(_shortened(f"msb panicked: {line}"))
            panicked = False
        elif _RUST_PANIC.search(line):
            panicked = True
        elif _RUNTIME_LEVEL.match(line) or _KERNEL_SIGNS.search(_KERNEL_TIME.sub("", line)):
            picked.append(_shortened(line))
    unique = list(dict.fromkeys(reversed(picked)))[:MAX_LINES]
    return list(reversed(unique))


def _shortened(line: str) -> str:
    return line if len(line) <= MAX_WIDTH else line[: MAX_WIDTH - 3] + "..."
