"""`test_attached_screen.py` on microsandbox: the VM's clipboard write and terminal query through
`msb exec --tty`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project
from tests.e2e.test_attached_screen import (
    assert_nothing_reached_the_terminal,
    clipboard_and_query_through_an_attached_shell,
)

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(2400), *MICROVMS_ONLY]


def test_the_vms_clipboard_write_and_query_never_reach_the_users_terminal(msb_project: Project, unique: str,
                                                                         tmp_path: Path) -> None:
    probed = clipboard_and_query_through_an_attached_shell(msb_project, f"osb-screen-msb-{unique}", tmp_path)
    assert_nothing_reached_the_terminal(probed)
    assert probed.clipboard is None and probed.answer == b""
