"""The guard on files the host runs, on a booting microVM: the guarded paths that exist are
mounted read-only over the checkout; root in the microVM can lift those mounts, so what changes
beneath them still counts as the VM's, and is reported and reverted before the host runs it."""

from __future__ import annotations

import shutil

import pytest

from opencode_sandbox.core.guard import REVIEW_FOLDER
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project, git

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]
PLANTED = "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/../hook-ran\"\n"


def test_guarded_paths_are_read_only_in_the_microvm_and_what_root_changes_anyway_is_reverted(
    msb_project: Project,
) -> None:
    project = msb_project
    hooks = project.root / ".git" / "hooks"
    shutil.rmtree(hooks)  # absent when the VM is made: not mounted, so the VM can make it

    planted = project.shell(f"mkdir -p .git/hooks && cat > .git/hooks/pre-commit <<'EOF'\n{PLANTED}EOF\n"
                            "chmod 755 .git/hooks/pre-commit")

    assert planted.returncode == 0, planted.stderr
    assert ".git/hooks/pre-commit: added (mode 0755, " in planted.stderr, planted.stderr
    assert "no terminal to ask on: reverting them" in planted.stderr
    assert not (hooks / "pre-commit").exists()
    [kept] = list((project.root / REVIEW_FOLDER).glob("*/.git/hooks/pre-commit"))
    assert kept.read_text() == PLANTED
    (project.root / "change.txt").write_text("x\n")
    git(project.root, "add", "change.txt")
    git(project.root, "commit", "-q", "-m", "after the VM")
    assert not (project.root.parent / "hook-ran").exists(), "git ran the hook the VM planted"

    again = project.shell("printf '#!/bin/sh\\n' > .git/hooks/pre-commit")
    assert again.returncode != 0 and "Read-only file system" in again.stderr, "hooks that exist are read-only"
    configured = project.shell("git config core.fsmonitor /workspace/evil")
    assert configured.returncode != 0, "the .git/config that existed at the start is read-only in the VM"
    own_config = project.shell("echo 'network: all' > .opencode-sandbox/config.yaml")
    assert own_config.returncode != 0 and "Read-only file system" in own_config.stderr, own_config.stderr
    assert project.shell("git status --short && cat .git/config >/dev/null").returncode == 0, "the VM's git reads it"
    assert not (project.root / ".opencode-sandbox" / "config.yaml").exists()

    lifted = project.cli("shell", "--root", "--", "sh", "-c",
                         f"umount /workspace/.git/hooks && printf '{PLANTED}' > /workspace/.git/hooks/post-checkout")
    assert lifted.returncode == 0, "root in a microVM lifts the mount: " + lifted.stderr
    assert "changed while the VM ran" in lifted.stderr and ".git/hooks/post-checkout: added" in lifted.stderr, \
        lifted.stderr
    assert not (hooks / "post-checkout").exists(), "a change beneath a read-only path is the VM's on microsandbox"
