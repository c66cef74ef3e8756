"""The launcher's reading of a gate's stream (`gated_exec._Gate`), piece by piece as the engine
hands it over, in orders the engine may choose: it keeps no order between the two streams."""

from __future__ import annotations

from opencode_sandbox.bounded_output import STDERR, STDOUT
from opencode_sandbox.runtime.docker.gated_exec import _EARLY_ERRORS, MARK, _Gate

TOKEN = b"00112233445566778899aabbccddeeff"


class Launcher:
    """A gate's stream as the launcher reads it: whether it sent the command, opened, and what it passed on."""

    def __init__(self) -> None:
        self.sent = 0
        self.opened = 0
        self.passed: list[tuple[int, bytes]] = []
        self.gate = _Gate(TOKEN, self._send, self._open, lambda stream, piece: self.passed.append((stream, piece)))

    def _send(self) -> None:
        self.sent += 1

    def _open(self) -> None:
        self.opened += 1


def test_the_commands_error_that_overtakes_its_mark_reaches_the_user_before_what_follows() -> None:
    launcher = Launcher()
    launcher.gate.take(STDOUT, TOKEN + b"\n")
    launcher.gate.take(STDERR, b"sh: 1: cannot create x: Read-only file system\n")
    launcher.gate.take(STDOUT, MARK + b"out\n")
    launcher.gate.take(STDERR, b"more\n")
    assert (launcher.sent, launcher.opened) == (1, 1)
    assert launcher.passed == [(STDERR, b"sh: 1: cannot create x: Read-only file system\n"), (STDOUT, b"out\n"),
                               (STDERR, b"more\n")]


def test_what_reaches_the_gates_error_before_the_command_is_sent_is_not_the_commands() -> None:
    launcher = Launcher()
    launcher.gate.take(STDERR, b"written by another process\n")
    launcher.gate.take(STDOUT, TOKEN + b"\n" + MARK)
    assert launcher.opened == 1 and launcher.passed == []


def test_the_error_held_for_a_mark_on_its_way_is_bounded() -> None:
    launcher = Launcher()
    launcher.gate.take(STDOUT, TOKEN + b"\n")
    for _ in range(3):
        launcher.gate.take(STDERR, b"e" * _EARLY_ERRORS)
    launcher.gate.take(STDOUT, MARK)
    assert launcher.passed == [(STDERR, b"e" * _EARLY_ERRORS)]
