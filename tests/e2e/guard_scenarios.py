"""The guard's steps that are the same on both runtimes: a hook the VM plants where none existed
is reported and reverted before git runs it, and the guarded paths that exist are read-only."""

from __future__ import annotations

from opencode_sandbox.core.guard import REVIEW_FOLDER
from tests.e2e.harness import Project, git

PLANTED = "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/../hook-ran\"\n"


def a_planted_hook_is_reverted_before_git_runs_it(project: Project) -> None:
    """The host's git runs hooks from the work tree (`core.hooksPath .githooks`, set on the host
    before the VM starts): a hook the VM plants there is reported and reverted; one it plants in
    its own git directory is never the host's."""
    git(project.root, "config", "core.hooksPath", ".githooks")
    # Written whole under another name and renamed into place: the watch puts a guarded file back
    # within seconds, so one written there step by step can go before the next step reads it.
    planted = project.shell(f"cat > hook.tmp <<'EOF'\n{PLANTED}EOF\n"
                            "chmod 755 hook.tmp && mkdir -p .githooks .git/hooks && "
                            "cp hook.tmp .git/hooks/pre-commit && mv hook.tmp .githooks/pre-commit")

    assert planted.returncode == 0, planted.stderr
    assert ".githooks/pre-commit: added (mode 0755, " in planted.stderr, planted.stderr
    assert '+touch "$(git rev-parse --show-toplevel)/../hook-ran"' in planted.stderr
    assert ("no terminal to ask on: reverting them" in planted.stderr  # the detach's review
            or "put back as they were within seconds" in planted.stderr), planted.stderr  # the watch, earlier
    assert not (project.root / ".githooks" / "pre-commit").exists()
    assert not (project.root / ".git" / "hooks" / "pre-commit").exists(), "the VM reached the host's .git"
    [kept] = list((project.root / REVIEW_FOLDER).glob("*/.githooks/pre-commit"))
    assert kept.read_text() == PLANTED and kept.stat().st_mode & 0o111 == 0
    (project.root / "change.txt").write_text("x\n")
    git(project.root, "add", "change.txt")
    git(project.root, "commit", "-q", "-m", "after the VM")
    assert not (project.root.parent / "hook-ran").exists(), "git ran the hook the VM planted"


def the_existing_guarded_paths_are_read_only(project: Project) -> None:
    own_config = project.shell("echo 'network: all' > .opencode-sandbox/config.yaml")
    assert own_config.returncode != 0 and "Read-only file system" in own_config.stderr, own_config.stderr
    configured = project.shell("git config core.fsmonitor /workspace/evil && git status --short >/dev/null")
    assert configured.returncode == 0, "the VM's git configuration is its own: " + configured.stderr
    assert "fsmonitor" not in (project.root / ".git" / "config").read_text(), "the host's config took the VM's"
