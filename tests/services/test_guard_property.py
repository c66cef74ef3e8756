"""The review, driven with random creations, renames and removals in the work tree around the
guarded paths and `.git`, as a VM might make them, with the idle reaper's rounds in between:
whatever the VM did, no change of its is ever taken as the user's, none outlasts a round, and no
git directory it made stays below the checkout."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services.guard import files as guard_files
from opencode_sandbox.services.guard import walk as guard_walk
from opencode_sandbox.services.guard.moves import catch_while_running
from opencode_sandbox.services.guard.reviews import guarded_paths, hooks_of, review
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app

PLACES = [".envrc", ".opencode-sandbox/config.yaml", ".opencode-sandbox", ".vscode/settings.json", ".vscode",
          ".husky/pre-commit", ".husky", ".githooks/pre-commit", ".githooks", "sub", "sub/.git", "sub/.git/config",
          "sub/deeper/.git", "bare", "bare/HEAD", "bare/objects", "bare/refs", "bare/config", "src/main.py",
          "moved", "moved/.git", ".git-old", ".pre-commit-config.yaml", "lefthook.yml"]

operation = st.one_of(
    st.tuples(st.just("file"), st.sampled_from(PLACES), st.sampled_from(["x\n", "#!/bin/sh\nevil\n"])),
    st.tuples(st.just("folder"), st.sampled_from(PLACES), st.just("")),
    st.tuples(st.just("link"), st.sampled_from(PLACES), st.sampled_from(["../outside", ".envrc", "/etc/passwd"])),
    st.tuples(st.just("rename"), st.sampled_from(PLACES), st.sampled_from(PLACES)),
    st.tuples(st.just("remove"), st.sampled_from(PLACES), st.just("")),
)


def apply(root: Path, kind: str, place: str, other: str) -> None:
    """One step of the VM in the work tree; a step that makes no sense there changes nothing."""
    target = root / place
    try:
        if kind == "file":
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_dir() and not target.is_symlink():
                return
            target.unlink(missing_ok=True)
            target.write_text(other)
        elif kind == "folder":
            target.mkdir(parents=True, exist_ok=True)
        elif kind == "link":
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() and not target.is_symlink():
                target.symlink_to(other)
        elif kind == "rename":
            destination = root / other
            if (target.exists() or target.is_symlink()) and not destination.exists() \
                    and not str(destination).startswith(str(target) + "/"):
                destination.parent.mkdir(parents=True, exist_ok=True)
                target.rename(destination)
        elif target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    except (FileExistsError, NotADirectoryError, FileNotFoundError, IsADirectoryError):
        pass


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True,
                   capture_output=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(operation, st.booleans()), min_size=1, max_size=8))
def test_no_change_the_vm_made_is_ever_taken_as_the_users(steps: list[tuple[tuple[str, str, str], bool]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "checkout"
        root.mkdir()
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "core.hooksPath", ".githooks")
        (root / ".envrc").write_text("export MINE=1\n")
        (root / ".githooks").mkdir()
        (root / ".githooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
        (root / ".opencode-sandbox").mkdir()
        git(root, "add", ".")
        git(root, "commit", "-q", "-m", "init")
        runtime = FakeRuntime(RuntimeKind.DOCKER)
        try:
            app = make_app(runtime, root)
            paths = guarded_paths(app.settings, root, hooks_of(app))
            review(app, vm_may_write_after=True)  # the start
            before = guard_files.take_snapshot(root, paths).entries
            for step, watch_round in steps:
                apply(root, *step)
                if watch_round:  # the idle reaper's round while the VM runs
                    catch_while_running(app.state.project_dir(app.project.slug).parent, app.project.slug,
                                        lambda _: None)
                    now = guard_files.take_snapshot(root, paths).entries
                    assert now == before, "a change the VM made stayed in place past a round"
                    assert guard_walk.walk_checkout(root, host_git=True).git_dirs == [], "a git directory stayed"

            review(app, vm_may_write_after=False)  # the stop, with no terminal: the VM's changes go

            after = guard_files.take_snapshot(root, paths).entries
            assert after == before, "a change the VM made stayed as the user's"
            assert guard_walk.walk_checkout(root, host_git=True).git_dirs == [], "a git directory the VM made stayed"
            second = review(app, vm_may_write_after=False)
            assert not second.by_vm, "the next review found the VM's work still there"
        finally:
            runtime.close()
