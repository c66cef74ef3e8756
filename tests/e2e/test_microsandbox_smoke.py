"""The lab smoke: the real CLI on the microsandbox runtime boots a project's VM, runs a command,
and keeps what was written in the home and the checkout across `stop` and the next start."""

from __future__ import annotations

import pytest

from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]


def test_first_shell_then_writes_survive_stop_and_start(msb_project: Project) -> None:
    first = msb_project.cli("shell", "--", "true")
    assert first.returncode == 0, first.stderr

    wrote = msb_project.shell("echo in-home > ~/lab-mark && echo in-checkout > lab-mark.txt && id -un && pwd")
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.splitlines() == ["dev", "/workspace"]
    assert (msb_project.root / "lab-mark.txt").read_text() == "in-checkout\n"

    stopped = msb_project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    vm = MicrosandboxRuntime().get_sandbox(msb_project.vm)
    assert vm is not None and not vm.status.is_active

    again = msb_project.shell("cat ~/lab-mark lab-mark.txt")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "in-home\nin-checkout\n"
