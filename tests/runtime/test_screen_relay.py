"""An attached session through the relay, on a real terminal (tmux, which keeps an OSC 52 write as
a paste buffer and answers a cursor position query into its input): the session's clipboard write
and query never reach the terminal, its text does; the keys reach the session, a resize too, the
exit status comes back and the terminal is given back as it was."""

from __future__ import annotations

import ast
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

SESSION = r'''
import os, select, sys, termios, tty
out = sys.argv[1]
os.write(1, b"before\x1b]52;c;aWQgPiAvdG1wL3B3bgo=\x07middle\r\n")
saved = termios.tcgetattr(0)
tty.setraw(0)
os.write(1, b"\x1b[6n")
answer = b""
while select.select([0], [], [], 1.0)[0]:
    answer += os.read(0, 100)
os.write(1, b"ready\r\n")
keys = b""
while not keys.endswith(b"\r"):
    keys += os.read(0, 100)
termios.tcsetattr(0, termios.TCSANOW, saved)
size = os.get_terminal_size(0)
with open(out, "w") as file:
    file.write(repr((answer, keys, size.columns, size.lines)))
os.write(1, b"after\r\n")
sys.exit(7)
'''

RELAYED = """
import sys
from opencode_sandbox.runtime.screen_relay import attach_relayed
sys.exit(attach_relayed([sys.executable, {session!r}, {out!r}], None))
"""

PLAIN = """
import subprocess, sys
sys.exit(subprocess.call([sys.executable, {session!r}, {out!r}]))
"""


class Terminal:
    def __init__(self, name: str, command: str, folder: Path) -> None:
        config = folder / "tmux.conf"
        config.write_text("set -g set-clipboard on\n")
        self.base = ["tmux", "-L", name]
        line = f"stty -g > {shlex.quote(str(folder / 'before'))}; {command}; echo EXIT-CODE=$?; " \
               f"stty -g > {shlex.quote(str(folder / 'after'))}; sleep 60"
        subprocess.run([*self.base, "-f", str(config), "new-session", "-d", "-x", "100", "-y", "30", line], check=True)

    def screen(self) -> str:
        return subprocess.run([*self.base, "capture-pane", "-p"], capture_output=True, text=True).stdout

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in (screen := self.screen()):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear:\n{self.screen()}")

    def clipboard(self) -> str | None:
        shown = subprocess.run([*self.base, "show-buffer"], capture_output=True, text=True)
        return shown.stdout if shown.returncode == 0 else None

    def run(self, *args: str) -> None:
        subprocess.run([*self.base, *args], check=True)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    path = tmp_path / "session.py"
    path.write_text(SESSION)
    return path


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for terminal in made:
        subprocess.run([*terminal.base, "kill-server"], capture_output=True)


def attach(template: str, session: Path, tmp_path: Path, terminals: list[Terminal]) -> tuple[Terminal, Path]:
    out = tmp_path / "out.txt"
    program = tmp_path / "attach.py"
    program.write_text(template.format(session=str(session), out=str(out)))
    terminal = Terminal(f"relay-{tmp_path.name}"[-40:], f"{shlex.quote(sys.executable)} {shlex.quote(str(program))}",
                        tmp_path)
    terminals.append(terminal)
    terminal.wait_for("ready")
    terminal.run("resize-window", "-x", "90", "-y", "25")
    time.sleep(0.3)
    terminal.run("send-keys", "typed", "Enter")
    terminal.wait_for("EXIT-CODE=")
    return terminal, out


def test_through_the_relay_the_clipboard_and_the_query_stay_in_the_session_and_the_rest_works(
        session: Path, tmp_path: Path, terminals: list[Terminal]) -> None:
    terminal, out = attach(RELAYED, session, tmp_path, terminals)
    screen = terminal.screen()
    assert "beforemiddle" in screen and "after" in screen and "EXIT-CODE=7" in screen, screen
    assert terminal.clipboard() is None
    answer, keys, columns, lines = ast.literal_eval(out.read_text())
    assert answer == b"", "the terminal answered the session's query"
    assert keys == b"typed\r"
    assert (columns, lines) == (90, 25), "the resize reached the session"
    assert (tmp_path / "before").read_text() == (tmp_path / "after").read_text(), "the terminal was given back"


def test_without_the_relay_the_same_session_reaches_the_terminal(session: Path, tmp_path: Path,
                                                                 terminals: list[Terminal]) -> None:
    terminal, out = attach(PLAIN, session, tmp_path, terminals)
    assert terminal.clipboard() == "id > /tmp/pwn\n"
    answer, *_ = ast.literal_eval(out.read_text())
    assert answer.startswith(b"\x1b[") and answer.endswith(b"R")


MODES_SESSION = r'''
import os, sys, time
os.write(1, b"\x1b[?1049h\x1b[?1003h\x1b[?1006h\x1b[?1004h\x1b[?25l\x1b=\x1b[?1h\x1b[2h")
time.sleep(0.2)
'''

FLOOD_SESSION = r'''
import os, sys, tty
tty.setraw(0)  # no echo: the answers it never reads are not drawn either
query = b"\x1b[c" * 100_000  # 300 KB a write, never reading the answers
for _ in range(14):
    os.write(1, query)
os.write(1, b"flooded\r\n")
'''


def run_relayed(session_text: str, tmp_path: Path, terminals: list[Terminal]) -> Terminal:
    session = tmp_path / "session.py"
    session.write_text(session_text)
    program = tmp_path / "attach.py"
    program.write_text(RELAYED.format(session=str(session), out=str(tmp_path / "out.txt")))
    terminal = Terminal(f"relay-{tmp_path.name}"[-40:], f"{shlex.quote(sys.executable)} {shlex.quote(str(program))}",
                        tmp_path)
    terminals.append(terminal)
    terminal.wait_for("EXIT-CODE=", timeout=60)
    return terminal


def test_the_modes_a_session_left_set_are_reset_when_it_ends(tmp_path: Path, terminals: list[Terminal]) -> None:
    terminal = run_relayed(MODES_SESSION, tmp_path, terminals)
    flags = subprocess.run([*terminal.base, "display-message", "-p",
                            "#{alternate_on} #{mouse_any_flag} #{mouse_sgr_flag} #{cursor_flag} #{keypad_flag} "
                            "#{keypad_cursor_flag} #{pane_in_mode}"], capture_output=True, text=True).stdout.split()
    assert flags == ["0", "0", "0", "1", "0", "0", "0"], flags


def test_a_session_that_floods_queries_and_reads_no_answer_costs_bounded_time(
        tmp_path: Path, terminals: list[Terminal]) -> None:
    began = time.monotonic()
    terminal = run_relayed(FLOOD_SESSION, tmp_path, terminals)
    assert "flooded" in terminal.screen() and "EXIT-CODE=0" in terminal.screen()
    assert time.monotonic() - began < 30
