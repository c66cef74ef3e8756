"""What the filter on the attached screen costs: 100 full-screen redraws (200 x 60 cells in
true colour, 68 KB each, as an interface draws them) pushed through a pseudo-terminal by `cat` and
relayed to /dev/null, through `core/screen_filter.py` and as a bare copy, in one process.

Target: at most 1 ms added per redraw (6 % of a frame at 60 Hz). The bare copy costs about 0.2 ms
a redraw here, so that budget is a ratio of 6 against it; the ratio is the last line. The time to
an agent's interface, which includes the relay, is `agent_interface.py`'s and `msb_warm_start.py`'s.
Run: .venv/bin/python bench/screen_relay.py [ROUNDS]
"""

from __future__ import annotations

import errno
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tty
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencode_sandbox.core.screen_filter import ScreenFilter

COLUMNS, ROWS, REDRAWS = 200, 60, 100
ADDED_MS_TARGET = 1.0
RATIO_TARGET = 6.0
_GLYPHS = "abcdefgh \u2500\u2502\u250c\u2510\u00e9"


def redraw(randomness: random.Random) -> bytes:
    """One full screen in synchronized output: each row placed, runs of 3 to 15 cells per colour pair."""
    out = [b"\x1b[?2026h\x1b[H"]
    for row in range(ROWS):
        out.append(b"\x1b[%d;1H" % (row + 1))
        column = 0
        while column < COLUMNS:
            run = min(randomness.randint(3, 15), COLUMNS - column)
            out.append(b"\x1b[38;2;%d;%d;%dm\x1b[48;2;%d;%d;%dm" % tuple(randomness.randrange(256) for _ in range(6)))
            out.append("".join(randomness.choice(_GLYPHS) for _ in range(run)).encode())
            column += run
    out.append(b"\x1b[0m\x1b[?2026l")
    return b"".join(out)


def relay_once(screen_file: Path, filtered: bool) -> float:
    """Seconds to relay the file's screen from a pseudo-terminal to /dev/null."""
    master, slave = os.openpty()
    tty.setraw(slave)
    began = time.perf_counter()
    writer = subprocess.Popen(["cat", str(screen_file)], stdout=slave)
    os.close(slave)
    sink = os.open(os.devnull, os.O_WRONLY)
    screen = ScreenFilter()
    try:
        while True:
            try:
                drawn = os.read(master, 65536)
            except OSError as error:
                if error.errno != errno.EIO:
                    raise
                break
            if not drawn:
                break
            os.write(sink, screen.feed(drawn)[0] if filtered else drawn)
        writer.wait()
        return time.perf_counter() - began
    finally:
        os.close(master)
        os.close(sink)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    randomness = random.Random(1)
    frames = [redraw(randomness) for _ in range(REDRAWS)]
    with tempfile.TemporaryDirectory() as folder:
        screen_file = Path(folder) / "screen.bin"
        screen_file.write_bytes(b"".join(frames))
        bare, filtered = [], []
        for _ in range(rounds):  # interleaved, so a busy moment costs both alike
            bare.append(relay_once(screen_file, filtered=False))
            filtered.append(relay_once(screen_file, filtered=True))
    bare_s, filtered_s = statistics.median(bare), statistics.median(filtered)
    added_ms = (filtered_s - bare_s) * 1000 / REDRAWS
    print(f"redraw bytes      {len(frames[0])}")
    print(f"bare copy         {bare_s * 1000:.1f} ms for {REDRAWS} redraws")
    print(f"filtered          {filtered_s * 1000:.1f} ms for {REDRAWS} redraws")
    print(f"added per redraw  {added_ms:.2f} ms (target <= {ADDED_MS_TARGET} ms)")
    print(f"filtered against bare (target <= {RATIO_TARGET}): ratio {filtered_s / bare_s:.2f}")


if __name__ == "__main__":
    main()
