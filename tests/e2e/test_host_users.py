"""The lifecycle as different host users: dev works in the checkout as the host user does."""

from __future__ import annotations

import os

import pytest

from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def _identity(project: Project) -> tuple[int, int]:
    return (project.user.uid, project.user.gid) if project.user else (os.getuid(), os.getgid())


def _dev_uid(host_uid: int) -> int:
    """`dev` is never uid 0: a root host user's files are mapped to the image's uid 1000."""
    return 1000 if host_uid == 0 else host_uid


def test_dev_writes_the_checkout_as_the_host_user_and_keeps_its_home(any_user_project: Project) -> None:
    project = any_user_project
    uid, gid = _identity(project)
    made = project.shell("echo from-dev > made-by-dev.txt && mkdir sub && touch sub/inner && echo $HOME && id -u")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == ["/home/dev", str(_dev_uid(uid))]
    for path in (project.root / "made-by-dev.txt", project.root / "sub", project.root / "sub" / "inner"):
        assert (path.stat().st_uid, path.stat().st_gid) == (uid, gid), path
    assert (project.root / "made-by-dev.txt").read_text() == "from-dev\n"

    # the host user's own files: edited in place, and git in the VM trusts the checkout
    edited = project.shell("echo changed >> README.md && git status --porcelain")
    assert edited.returncode == 0, edited.stderr
    assert " M README.md" in edited.stdout.splitlines()
    assert (project.root / "README.md").read_text() == "# e2e\nchanged\n"

    assert project.shell("echo kept > ~/note").returncode == 0
    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert project.container_state() == "exited"
    again = project.shell("cat ~/note && stat -c %u ~/note ~/.bashrc")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == "kept"
    assert set(again.stdout.splitlines()[1:]) == {str(_dev_uid(uid))}
