"""The guard on files the host runs, on a booting microVM: the checkout's guarded paths stay
writable there, so what the VM writes is reported and reverted before the host runs it."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.guard import REVIEW_FOLDER
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project, git

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]
PLANTED = "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/../hook-ran\"\n"


def test_a_hook_the_microvm_writes_is_reported_and_reverted_before_git_runs_it(msb_project: Project) -> None:
    project = msb_project
    hook = project.root / ".git" / "hooks" / "pre-commit"

    planted = project.shell(f"cat > .git/hooks/pre-commit <<'EOF'\n{PLANTED}EOF\nchmod 755 .git/hooks/pre-commit")

    assert planted.returncode == 0, "the checkout's guarded paths stay writable in a microVM: " + planted.stderr
    assert ".git/hooks/pre-commit: added (mode 0755, " in planted.stderr, planted.stderr
    assert "no terminal to ask on: reverting them" in planted.stderr
    assert not hook.exists()
    [kept] = list((project.root / REVIEW_FOLDER).glob("*/.git/hooks/pre-commit"))
    assert kept.read_text() == PLANTED
    (project.root / "change.txt").write_text("x\n")
    git(project.root, "add", "change.txt")
    git(project.root, "commit", "-q", "-m", "after the VM")
    assert not (project.root.parent / "hook-ran").exists(), "git ran the hook the VM planted"
