"""`kill` and `kill --force` through the CLI on the docker runtime with the real runner image."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Project, docker

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_kill_powers_off_and_kill_force_removes_the_vm_keeping_its_home(project: Project) -> None:
    assert project.shell("echo kept > ~/note").returncode == 0
    [volume] = project.home_volumes()

    killed = project.cli("kill")
    assert killed.returncode == 0, killed.stderr
    assert project.container_state() == "exited"

    assert project.shell("true").returncode == 0
    assert project.container_state() == "running"
    removed = project.cli("kill", "--force")
    assert removed.returncode == 0, removed.stderr
    assert f"Killed {project.vm}.\nRemoved {project.vm}.\n" in removed.stdout
    assert project.vms() == []
    assert project.home_volumes() == [volume]
    note = docker("run", "--rm", "-v", f"{volume}:/home/dev:ro", "debian:trixie-slim", "cat", "/home/dev/note")
    assert note.stdout == "kept\n", note.stderr
