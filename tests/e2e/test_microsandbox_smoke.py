"""The lab smoke: the real CLI on the microsandbox runtime boots a project's VM, runs a command,
and keeps what was written in the home and the checkout across `stop` and the next start."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.errors import SandboxError
from opencode_sandbox.runtime.kvm import probe_kvm
from opencode_sandbox.runtime.microsandbox_backend import MicrosandboxRuntime
from tests.e2e.harness import Project, project_on
from tests.fixtures.images import RunnerBase

kvm_check = probe_kvm()
pytestmark = [
    pytest.mark.kvm,
    pytest.mark.msb,
    pytest.mark.docker,
    pytest.mark.e2e,
    pytest.mark.skipif(not kvm_check.ok, reason=f"microVMs cannot boot here: {kvm_check.cause}"),
]


def remove_microsandbox_artifacts(slug: str) -> None:
    """The project's VM and home volumes in this test's MSB_HOME."""
    runtime = MicrosandboxRuntime()
    for sandbox in runtime.list_sandboxes():
        if sandbox.labels.get("org.opencode-sandbox.slug") == slug:
            with contextlib.suppress(SandboxError):
                runtime.kill_sandbox(sandbox.name)
                runtime.remove_sandbox(sandbox.name)
    for volume in runtime.list_volumes():
        if volume.labels.get("org.opencode-sandbox.slug") == slug:
            with contextlib.suppress(SandboxError):
                runtime.remove_volume(volume.name)


@pytest.fixture
def msb_project(
    tmp_path: Path, unique: str, runner_base_image: RunnerBase, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Project]:
    """A fresh git project on the microsandbox runtime, with the session's base image."""
    created = project_on("microsandbox", tmp_path / f"checkout {unique}", unique,
                         runner_base_image.opencode_version, monkeypatch)
    try:
        yield created
    finally:
        remove_microsandbox_artifacts(created.slug)
        created.cleanup()


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
