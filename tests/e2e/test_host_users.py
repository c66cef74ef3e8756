"""The lifecycle as different host users: dev works in the checkout as the host user does, and on
a shared Docker engine one user's run never touches the VM of another's clone of the same remote."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import LABEL_OWNER_UID
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.runtime.docker.netfilter import network_name
from tests.e2e.harness import Project, docker, make_project
from tests.fixtures.host_users import HostUser
from tests.fixtures.images import RunnerBase

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


def _vm_document(name: str) -> dict[str, object]:
    inspected = docker("inspect", name)
    assert inspected.returncode == 0, inspected.stderr
    document: dict[str, object] = json.loads(inspected.stdout)[0]
    return document


def _untouched(name: str) -> tuple[object, ...]:
    """What any recreate, restart or stop of the VM changes."""
    document = _vm_document(name)
    state = document["State"]
    assert isinstance(state, dict)
    return document["Id"], state["StartedAt"], state["Status"]


def test_another_host_users_clone_of_the_same_remote_leaves_the_vm_alone(
    project: Project, other_host_user: HostUser, runner_base_image: RunnerBase, tmp_path: Path, unique: str
) -> None:
    started = project.shell("echo mine > ~/note")
    assert started.returncode == 0, started.stderr
    owner = os.getuid()
    document = _vm_document(project.vm)
    config = document["Config"]
    assert isinstance(config, dict) and config["Labels"][LABEL_OWNER_UID] == str(owner)
    before = _untouched(project.vm)
    [home] = project.home_volumes()
    network = network_name(project.slug)

    theirs = make_project(tmp_path / f"their checkout {unique}", unique, other_host_user)
    assert theirs.home is not None and theirs.slug == project.slug, "a clone of the same remote"
    record_baked_version(theirs.paths.state_dir, runner_base_image.opencode_version)
    other_host_user.give(theirs.home)
    theirs.env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h")
    try:
        refused = theirs.cli("shell", "--", "true")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        owner_name = pwd.getpwuid(owner).pw_name
        assert f"error: the VM {project.vm} belongs to host user {owner_name} (uid {owner}), not to you, " \
               f"{other_host_user.name} (uid {other_host_user.uid})" in refused.stderr, refused.stderr
        assert "`opencode-sandbox kill --force`" in refused.stderr and "--runtime microsandbox" in refused.stderr
        assert "Recreating" not in refused.stdout + refused.stderr
        assert _untouched(project.vm) == before

        for command in (("stop",), ("kill", "--force")):
            other = theirs.cli(*command)
            assert other.returncode == 1 and "belongs to host user" in other.stderr, other.stdout + other.stderr
        listed = theirs.cli("list", "--names")
        assert listed.returncode == 0 and project.vm not in listed.stdout.split(), listed.stdout + listed.stderr
        pruned = theirs.cli("prune", "--force", "-a", "0s")
        assert pruned.returncode == 0, pruned.stdout + pruned.stderr
        assert project.vm not in pruned.stdout and home not in pruned.stdout, pruned.stdout

        assert _untouched(project.vm) == before
        assert docker("volume", "inspect", home).returncode == 0
        assert docker("network", "inspect", network).returncode == 0
        kept = project.shell("cat ~/note")
        assert kept.returncode == 0 and kept.stdout == "mine\n", kept.stderr
        assert _untouched(project.vm)[0] == before[0], "the owner's next run uses the same VM"
    finally:
        theirs.cleanup()
