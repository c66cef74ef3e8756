"""The VM's screen on the user's terminal: an attached session in the VM writes the host's
clipboard with OSC 52 and asks the terminal for its cursor position, which a terminal answers by
typing into its input (where a late answer lands in the user's shell). Neither reaches the
terminal, a real one (tmux, which honours both), while the text around them is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from tests.e2e.harness import Project, Tmux, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(1800)]

CLIPBOARD_TEXT = "id > /tmp/pwn"
PROBE = ("printf 'before\\033]52;c;aWQgPiAvdG1wL3B3bgo=\\007middle'; stty raw -echo; printf '\\033[6n';"
         " timeout --foreground 3 dd bs=1 count=8 of=/workspace/answer.bin 2>/dev/null; stty sane;"
         " printf 'after\\n'")


class Probed(NamedTuple):
    screen: str
    clipboard: str | None
    """What the terminal's clipboard holds afterwards (tmux keeps an OSC 52 write as a paste buffer)."""
    answer: bytes
    """What the VM read from its input after its cursor position query."""


def clipboard_and_query_through_an_attached_shell(project: Project, name: str, tmp_path: Path) -> Probed:
    config = tmp_path / "tmux.conf"
    config.write_text("set -g set-clipboard on\n")
    terminal = Tmux(name, project.terminal_command("shell", "--", "sh", "-c", PROBE), project.root,
                    project.env, config=config)
    try:
        screen = terminal.wait_for(r"EXIT-CODE=\d+", timeout=1200)
        answer = project.root / "answer.bin"
        wait_until(answer.exists, 10)
        return Probed(screen, terminal.paste_buffer(), answer.read_bytes() if answer.exists() else b"(none)")
    finally:
        terminal.close()


def assert_nothing_reached_the_terminal(probed: Probed) -> None:
    assert "EXIT-CODE=0" in probed.screen, probed.screen
    assert "beforemiddle" in probed.screen and "after" in probed.screen, probed.screen
    assert probed.clipboard is None, "the VM wrote the terminal's clipboard"
    assert probed.answer == b"", "the terminal answered the VM's query into its input"


def test_the_vms_clipboard_write_and_query_never_reach_the_users_terminal(any_user_project: Project,
                                                                         unique: str, tmp_path: Path) -> None:
    probed = clipboard_and_query_through_an_attached_shell(any_user_project, f"osb-screen-{unique}", tmp_path)
    assert_nothing_reached_the_terminal(probed)
    assert probed.clipboard is None and probed.answer == b""
