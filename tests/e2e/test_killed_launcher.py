"""A launcher killed while the VM boots, on either runtime: the project's next run works, with one
VM and one home volume."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.e2e.harness import Project, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(2400)]

BOOT_WAIT_S = 900


def test_a_launcher_killed_during_boot_leaves_a_project_whose_next_run_works(runtime_project: Project) -> None:
    project = runtime_project
    launcher = subprocess.Popen(
        project.command("shell", "--", "sleep", "600"), cwd=project.root, env=project.process_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        booting = wait_until(lambda: launcher.poll() is not None or project.vm_info() is not None,
                             timeout=BOOT_WAIT_S, interval=0.1)
    finally:
        exited = launcher.poll()
        if exited is None:
            os.killpg(launcher.pid, signal.SIGKILL)  # the launcher and every process it started
        launcher.wait(60)
    # Read only once the launcher is gone: reading a live launcher's stderr waits for it to finish.
    errors = launcher.stderr.read() if launcher.stderr else ""
    assert exited is None, f"the launcher ended (exit status {exited}) before it was killed: {errors}"
    assert booting, f"no VM appeared within {BOOT_WAIT_S} s; the launcher said: {errors}"

    again = project.shell("cat README.md")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "# e2e\n"
    assert project.vms() == [project.vm]
    assert len(project.home_volumes()) == 1
    assert project.vm_running()
