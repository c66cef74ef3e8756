"""On booting microVMs: `doctor` reads dev's home in the running VM, and a VM whose
`opencode serve` is gone stops by itself once the last client left."""

from __future__ import annotations

import pytest

from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.types import SandboxStatus
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]

IDLE_TIMEOUT_S = 60
"""Long enough for the test to kill opencode serve before the reaper first asks, in the lab too."""


def test_doctor_checks_the_home_and_a_vm_without_opencode_serve_stops(
    msb_project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", f"{IDLE_TIMEOUT_S}s")
    runtime = MicrosandboxRuntime()
    started = msb_project.cli("shell", "--", "id", "-u")
    assert started.returncode == 0, started.stderr
    dev_uid = started.stdout.strip()

    runtime.exec(msb_project.vm, ["pkill", "-KILL", "-f", "opencode serve --hostname"], workdir="/")
    assert runtime.exec(msb_project.vm, ["pgrep", "-f", "opencode serve --hostname"], workdir="/").exit_code == 1
    doctor = msb_project.cli("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"home    dev (uid {dev_uid}, gid " in doctor.stdout
    assert f"can use its home in {msb_project.vm}" in doctor.stdout

    def stopped() -> bool:
        info = runtime.get_sandbox(msb_project.vm)
        return info is not None and info.status not in (SandboxStatus.RUNNING, SandboxStatus.STARTING)

    assert wait_until(stopped, timeout=IDLE_TIMEOUT_S + 240, interval=5)
    log = (msb_project.state_dir / "reaper.log").read_text()
    assert "opencode serve is not running in the VM" in log, log
