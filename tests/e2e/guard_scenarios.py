"""The guard's steps that are the same on both runtimes: a hook the VM plants where none existed
is reported and reverted before git runs it, and the guarded paths that exist are read-only."""

from __future__ import annotations

import shutil

from opencode_sandbox.core.guard import REVIEW_FOLDER
from tests.e2e.harness import Project, git

PLANTED = "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/../hook-ran\"\n"


def a_planted_hook_is_reverted_before_git_runs_it(project: Project) -> None:
    """Starts the project's VM with no `.git/hooks` (so it is not mounted) and plants a hook."""
    hooks = project.root / ".git" / "hooks"
    shutil.rmtree(hooks)
    planted = project.shell(f"mkdir -p .git/hooks && cat > .git/hooks/pre-commit <<'EOF'\n{PLANTED}EOF\n"
                            "chmod 755 .git/hooks/pre-commit")

    assert planted.returncode == 0, planted.stderr
    assert ".git/hooks/pre-commit: added (mode 0755, " in planted.stderr, planted.stderr
    assert '+touch "$(git rev-parse --show-toplevel)/../hook-ran"' in planted.stderr
    assert "no terminal to ask on: reverting them" in planted.stderr
    assert not (hooks / "pre-commit").exists()
    [kept] = list((project.root / REVIEW_FOLDER).glob("*/.git/hooks/pre-commit"))
    assert kept.read_text() == PLANTED and kept.stat().st_mode & 0o111 == 0
    (project.root / "change.txt").write_text("x\n")
    git(project.root, "add", "change.txt")
    git(project.root, "commit", "-q", "-m", "after the VM")
    assert not (project.root.parent / "hook-ran").exists(), "git ran the hook the VM planted"


def the_existing_guarded_paths_are_read_only(project: Project) -> None:
    again = project.shell("printf '#!/bin/sh\\n' > .git/hooks/pre-commit")
    assert again.returncode != 0 and "Read-only file system" in again.stderr, "hooks that exist are read-only"
    configured = project.shell("git config core.fsmonitor /workspace/evil")
    assert configured.returncode != 0, "the .git/config that existed at the start is read-only in the VM"
    own_config = project.shell("echo 'network: all' > .opencode-sandbox/config.yaml")
    assert own_config.returncode != 0 and "Read-only file system" in own_config.stderr, own_config.stderr
    assert project.shell("git status --short && cat .git/config >/dev/null").returncode == 0, "the VM's git reads it"
