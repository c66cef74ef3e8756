"""The VM's git directory on the host side, with real git: the seed, the object checks on what the
VM sends, and the fast-forward rule."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.project import git_paths
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services import vm_git
from tests.fakes.runtime import FakeRuntime


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise AssertionError(done.stderr)
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "one")
    git(root, "remote", "add", "origin", "https://me:token@example.org/p.git")
    git(root, "config", "core.fsmonitor", "true")
    (root / "staged.txt").write_text("staged\n")
    git(root, "add", "staged.txt")
    return root


def seeded(checkout: Path, tmp_path: Path) -> vm_git.Layout:
    found = vm_git.layout(checkout, tmp_path / "state", git_paths(checkout))
    assert found is not None
    assert vm_git.ensure_seeded(found)
    assert not vm_git.ensure_seeded(found), "made once, then the VM's"
    return found


def as_vm(found: vm_git.Layout, *args: str, check: bool = True) -> str:
    """Git on the seeded directory as git in the VM sees it (the host's objects at their path there)."""
    return git(found.root, "--git-dir", str(found.state), "--work-tree", str(found.root), *args,
               env={"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(found.common_dir / "objects")}, check=check)


def test_the_seed_is_a_working_repository_with_the_hosts_branches_and_staged_files(checkout: Path,
                                                                                  tmp_path: Path) -> None:
    found = seeded(checkout, tmp_path)
    assert as_vm(found, "rev-parse", "HEAD") == git(checkout, "rev-parse", "HEAD")
    assert as_vm(found, "status", "--porcelain") == "A  staged.txt"
    assert as_vm(found, "rev-parse", "refs/remotes/host/main") == git(checkout, "rev-parse", "main")
    assert as_vm(found, "config", "remote.origin.url") == "https://me@example.org/p.git"
    assert as_vm(found, "config", "core.fsmonitor", check=False) == ""
    assert (found.state / "objects" / "info" / "alternates").read_text() == vm_git.HOST_OBJECTS + "\n"
    assert oct(found.state.stat().st_mode & 0o777) == "0o700"


def test_a_bundle_with_a_broken_object_is_refused_and_no_ref_is_made(checkout: Path, tmp_path: Path) -> None:
    vm = tmp_path / "vm"
    git(tmp_path, "clone", "-q", str(checkout), str(vm))
    base = git(vm, "rev-parse", "HEAD")
    tree = git(vm, "rev-parse", "HEAD^{tree}")
    broken = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"], cwd=vm,
                            input=f"tree {tree}\nparent {base}\nauthor nobody\n\nbroken\n", capture_output=True,
                            text=True, check=True).stdout.strip()
    git(vm, "update-ref", "refs/heads/main", broken)
    bundle = tmp_path / "state" / "incoming.bundle"
    bundle.parent.mkdir()
    git(vm, "bundle", "create", "-q", str(bundle), "main", f"^{base}")
    found = vm_git.layout(checkout, tmp_path / "state", git_paths(checkout))
    assert found is not None
    syncer = vm_git.Syncer(FakeRuntime(RuntimeKind.DOCKER), "vm", found, lambda line: None)

    with pytest.raises(vm_git.GitSyncError, match="failed the object checks"):
        syncer._index_bundle(bundle, ["refs/heads/main"])
    assert git(checkout, "cat-file", "-t", broken, check=False) == ""


def fast_forward(checkout: Path) -> str:
    return subprocess.run(["sh", "-c", vm_git.FAST_FORWARD, "ff", "refs/sandbox/heads/", "test"], cwd=checkout,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_branch_moves_only_when_that_adds_commits_nothing_is_staged_and_the_tree_matches(
    checkout: Path, tmp_path: Path,
) -> None:
    git(checkout, "commit", "-q", "-m", "two")
    start = git(checkout, "rev-parse", "HEAD")
    (checkout / "b.txt").write_text("b\n")
    agent = git(checkout, "commit-tree", "-p", start, "-m", "agent", _tree_with(checkout, "b.txt"))
    git(checkout, "update-ref", "refs/sandbox/heads/main", agent)
    assert fast_forward(checkout) == "moved main"
    assert git(checkout, "rev-parse", "main") == agent and git(checkout, "status", "--porcelain") == ""

    other = git(checkout, "commit-tree", "-p", agent, "-m", "agent again", _tree_with(checkout, "c.txt"))
    git(checkout, "update-ref", "refs/sandbox/heads/main", other)
    (checkout / ".git" / "MERGE_HEAD").write_text(agent + "\n")
    assert fast_forward(checkout) == "busy main", "a merge in progress is the user's"
    (checkout / ".git" / "MERGE_HEAD").unlink()
    assert fast_forward(checkout) == "differs main", "c.txt is not in the work tree"
    (checkout / "c.txt").write_text("c\n")
    (checkout / "d.txt").write_text("d\n")
    git(checkout, "add", "d.txt")
    assert fast_forward(checkout) == "staged main"
    git(checkout, "commit", "-q", "-m", "host side")
    assert fast_forward(checkout) == "diverged main"
    assert git(checkout, "log", "-1", "--format=%s") == "host side"


def _tree_with(checkout: Path, name: str) -> str:
    """The tree of HEAD with `name` added as it is in the work tree, made in a scratch index."""
    scratch = {"GIT_INDEX_FILE": str(checkout / ".git" / "scratch-index")}
    if not (checkout / name).exists():
        (checkout / name).write_text(name + "\n")
        try:
            return _tree_with(checkout, name)
        finally:
            (checkout / name).unlink()
    git(checkout, "read-tree", "HEAD", env=scratch)
    git(checkout, "add", name, env=scratch)
    return git(checkout, "write-tree", env=scratch)


@pytest.fixture
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test changes refs and looks at once; its file system's times are fine-grained."""
    monkeypatch.setattr(vm_git, "RACY_S", 0.0)


def test_the_stamp_changes_with_either_sides_refs_and_with_nothing_else(
    checkout: Path, tmp_path: Path, no_racy_window: None,
) -> None:
    found = seeded(checkout, tmp_path)
    first = vm_git.refs_stamp(found)
    assert first is not None and vm_git.refs_stamp(found) == first
    (checkout / "work.txt").write_text("edited\n")
    git(checkout, "add", "work.txt")
    as_vm(found, "add", "a.txt")
    assert vm_git.refs_stamp(found) == first, "the index and the work tree are not refs"

    seen = {first}
    for change in (
        lambda: git(checkout, "commit", "-q", "-m", "host"),
        lambda: as_vm(found, "commit", "-q", "-m", "vm"),
        lambda: as_vm(found, "branch", "topic"),
        lambda: as_vm(found, "branch", "-D", "topic"),
        lambda: as_vm(found, "pack-refs", "--all"),
        lambda: git(checkout, "checkout", "-q", "-b", "other"),
        lambda: git(checkout, "update-ref", "refs/sandbox/heads/main", "HEAD"),
    ):
        change()
        now = vm_git.refs_stamp(found)
        assert now is not None and now not in seen
        seen.add(now)


def test_the_stamp_says_nothing_about_a_change_within_the_racy_window_or_too_many_refs(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = seeded(checkout, tmp_path)
    assert vm_git.refs_stamp(found) is None, "the seed was made just now"
    monkeypatch.setattr(vm_git, "RACY_S", 0.0)
    assert vm_git.refs_stamp(found) is not None
    for number in range(20):
        as_vm(found, "branch", f"b{number}")
    monkeypatch.setattr(vm_git, "STAMP_ENTRY_LIMIT", 20)
    assert vm_git.refs_stamp(found) is None


def test_the_stamp_describes_a_link_the_vm_made_without_following_it(
    checkout: Path, tmp_path: Path, no_racy_window: None,
) -> None:
    found = seeded(checkout, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (found.state / "refs" / "heads" / "link").symlink_to(elsewhere)
    before = vm_git.refs_stamp(found)
    (elsewhere / "inside").write_text("x\n")
    assert vm_git.refs_stamp(found) == before, "nothing behind the link is read"


def test_a_folder_chain_the_vm_makes_deeper_than_any_ref_stops_the_stamp_not_the_start(
    checkout: Path, tmp_path: Path, no_racy_window: None,
) -> None:
    """The agent's attack on the walk: 1,200 nested folders below the VM's refs (past Python's
    recursion limit) must leave the stamp saying nothing, not end the launcher or the reaper."""
    found = seeded(checkout, tmp_path)
    folder = os.open(found.state / "refs" / "heads", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1200):
            os.mkdir("d", dir_fd=folder)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
        os.close(folder)
        assert vm_git.refs_stamp(found) is None
    finally:
        # rm walks without recursion; pytest's clean-up of old temporary folders would not
        subprocess.run(["rm", "-rf", str(found.state / "refs" / "heads" / "d")], check=True)
