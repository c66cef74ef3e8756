"""The guard on files the host runs, on a booting microVM: the checkout's guarded paths stay
writable there, so what the VM writes is reported and reverted before the host runs it."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.guard import REVIEW_FOLDER
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project, git

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]


def test_a_hook_the_microvm_writes_is_reported_and_reverted_before_git_runs_it(msb_project: Project) -> None:
    project = msb_project
    planted = project.shell(
        "printf '#!/bin/sh\\ntouch \"$(git rev-parse --show-toplevel)/../hook-ran\"\\n' > .git/hooks/pre-commit"
        " && chmod 755 .git/hooks/pre-commit")
    assert planted.returncode == 0, planted.stderr
    hook = project.root / ".git" / "hooks" / "pre-commit"
    assert hook.exists()

    reviewed = project.cli("stop")

    assert reviewed.returncode == 0, reviewed.stderr
    assert ".git/hooks/pre-commit: added (mode 0755, " in reviewed.stderr, reviewed.stderr
    assert "no terminal to ask on: reverting them" in reviewed.stderr
    assert not hook.exists()
    assert list((project.root / REVIEW_FOLDER).glob("*/.git/hooks/pre-commit"))
    (project.root / "change.txt").write_text("x\n")
    git(project.root, "add", "change.txt")
    git(project.root, "commit", "-q", "-m", "after the VM")
    assert not (project.root.parent / "hook-ran").exists(), "git ran the hook the VM planted"
