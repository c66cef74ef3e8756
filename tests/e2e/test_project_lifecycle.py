"""A project's life on either runtime, in one scenario: the first run, the checkout and the home
across `stop` and a start, then `stop -f` (VM and state gone, home volume kept) and the next run.

Each step is asserted in order; the microVM runtime pays its image load once for all of them.
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(2400)]

LARGE_FILE_MIB = 48
WRITE_THEN_HASH = (f"head -c {LARGE_FILE_MIB}M /dev/urandom > ~/large.bin"
                   " && sha256sum ~/large.bin | cut -d' ' -f1")


def test_first_run_checkout_ownership_and_home_across_stop_and_stop_force(runtime_project: Project) -> None:
    project = runtime_project
    owner = (os.getuid(), os.getgid())

    first = project.shell("id -un; pwd; echo $HOME; echo $OPENCODE_DISABLE_AUTOUPDATE; exit 7")
    assert first.returncode == 7, first.stderr
    assert first.stdout.splitlines() == ["dev", "/workspace", "/home/dev", "true"]
    assert "Creating" in first.stderr
    created = project.vm_created()
    assert project.vm_running()
    [volume] = project.home_volumes()

    made = project.shell("echo from-dev > made-by-dev.txt && mkdir sub && echo inner > sub/inner"
                         " && echo changed >> README.md && git status --porcelain")
    assert made.returncode == 0, made.stderr
    assert " M README.md" in made.stdout.splitlines()
    assert (project.root / "README.md").read_text() == "# e2e\nchanged\n"
    assert (project.root / "made-by-dev.txt").read_text() == "from-dev\n"
    for path in (project.root / "made-by-dev.txt", project.root / "sub", project.root / "sub" / "inner"):
        assert (path.stat().st_uid, path.stat().st_gid) == owner, path
    assert "Creating" not in made.stderr and "Starting" not in made.stderr
    assert project.vm_created() == created

    wrote = project.shell("echo kept > ~/note && " + WRITE_THEN_HASH)
    assert wrote.returncode == 0, wrote.stderr
    large_hash = wrote.stdout.strip()
    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert project.vm_stopped()

    again = project.shell("cat ~/note && sha256sum ~/large.bin | cut -d' ' -f1 && cat made-by-dev.txt")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == ["kept", large_hash, "from-dev"]
    assert f"Starting {project.vm}" in again.stderr
    assert project.vm_created() == created
    assert project.home_volumes() == [volume]

    removed = project.cli("stop", "-f")
    assert removed.returncode == 0, removed.stderr
    assert project.vms() == []
    assert not (project.state_dir / "state.yaml").exists()
    assert project.home_volumes() == [volume]
    assert volume in project.cli("volume", "list").stdout

    # `stop -f` forgets the project's state: the next run makes a fresh home and keeps the old one
    after_removal = project.shell("test -e ~/note && echo old-home || echo fresh-home")
    assert after_removal.returncode == 0, after_removal.stderr
    assert after_removal.stdout == "fresh-home\n"
    assert project.vms() == [project.vm]
    [fresh] = set(project.home_volumes()) - {volume}
    assert sorted(project.home_volumes()) == sorted([volume, fresh])
