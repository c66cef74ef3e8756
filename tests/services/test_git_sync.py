"""The host's side of the git sync, with real git on both sides: the VM's git directory is a
folder here, and a fake runtime runs the VM's commands on it as git in the VM would. The attacks
that made the tool's own sync run the VM's code are kept here: a gitlink to a folder holding a
repository whose `core.fsmonitor` runs, a hook in a `core.hooksPath` inside the checkout, a change
hidden in history, a tree naming millions of paths, and a bundle swollen to gigabytes."""

from __future__ import annotations

import io
import os
import subprocess
import time
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import GIT_OWN, LABEL_GIT, vm_name
from opencode_sandbox.project import git_paths
from opencode_sandbox.runtime.types import ExecResult, RuntimeKind, SandboxSpec
from opencode_sandbox.services import vm_git
from opencode_sandbox.services.git_sync import bundle_copy, held
from opencode_sandbox.services.git_sync.fast_forward import fast_forward
from opencode_sandbox.services.git_sync.host_git import GitSyncError
from opencode_sandbox.state_layout import ProjectLayout
from tests.fakes.runtime import ExecCall, FakeRuntime
from tests.services.test_vm_git import git

VM = vm_name("git-sync-0123456789abcd")


class TwoSides:
    """A host checkout and the VM's own git directory beside it, seeded as a start seeds it."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "checkout"
        self.root.mkdir()
        git(self.root, "init", "-q", "-b", "main")
        (self.root / "a.txt").write_text("a\n")
        git(self.root, "add", "a.txt")
        git(self.root, "commit", "-q", "-m", "one")
        self.marker = tmp_path / "pwned"
        self.project_dir = tmp_path / "state"
        found = vm_git.layout(self.root, self.project_dir, git_paths(self.root))
        assert found is not None
        self.found = found
        assert vm_git.ensure_seeded(found)
        self.vm("git reset -q")
        self.runtime = FakeRuntime(RuntimeKind.DOCKER)
        self.runtime.add_docker_image("runner")
        self.runtime.create_sandbox(SandboxSpec(name=VM, image="runner", cpus=1, memory_mib=512,
                                                labels={LABEL_GIT: GIT_OWN}))
        self.runtime.on_exec("sh", self._in_vm)
        self.log: list[str] = []

    def vm_env(self) -> dict[str, str]:
        return {**{key: value for key, value in os.environ.items() if not key.startswith("GIT_")},
                "GIT_DIR": str(self.found.state), "GIT_WORK_TREE": str(self.root),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.found.common_dir / "objects"),
                "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.org",
                "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@example.org", "IN_THE_VM": "1"}

    def vm(self, script: str) -> str:
        """`script` as the agent runs it in the VM's checkout."""
        done = subprocess.run(["sh", "-c", script], cwd=self.root, env=self.vm_env(), capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def _in_vm(self, call: ExecCall) -> ExecResult:
        argv = [part.replace(self.found.vm_git_dir, str(self.found.state)) for part in call.argv]
        done = subprocess.run(argv, cwd=self.root, env=self.vm_env(), input=call.stdin, capture_output=True,
                              check=False)
        return ExecResult(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))

    def sync(self, branch_limit: int = vm_git.BRANCH_LIMIT) -> vm_git.SyncReport:
        return vm_git.Syncer(self.runtime, VM, self.found, self.log.append, vm_git.guarded_for_sync(self.project_dir),
                             branch_limit).sync()

    def plant_repository(self, folder: str) -> None:
        """A repository in the checkout whose configuration runs a command wherever git looks into it
        (git in the VM may run it: that is the VM's own business, so it leaves no mark)."""
        alone = "env -u GIT_DIR -u GIT_WORK_TREE git"
        self.vm(f"{alone} init -q {folder} && "
                f"{alone} -C {folder} config core.fsmonitor '[ -n \"$IN_THE_VM\" ] || touch {self.marker}; false'")
        assert (self.root / folder / ".git" / "config").read_text().count("fsmonitor") == 1

    def agent_commit(self, script: str, *index_args: str) -> str:
        """What the agent's commit puts under `refs/sandbox/heads/main` once its objects came in: the
        work tree after `script`, staged whole (and `index_args` on top) on the last such commit."""
        scratch = {"GIT_INDEX_FILE": str(self.root / ".git" / "scratch-index")}
        parent = self.sandbox_ref("main") or git(self.root, "rev-parse", "HEAD")
        git(self.root, "read-tree", parent, env=scratch)
        self.vm(script)
        git(self.root, "add", "-A", env=scratch)
        if index_args:
            git(self.root, "update-index", *index_args, env=scratch)
        commit = git(self.root, "commit-tree", "-p", parent, "-m", "agent", git(self.root, "write-tree", env=scratch))
        git(self.root, "update-ref", "refs/sandbox/heads/main", commit)
        return commit

    def sandbox_ref(self, branch: str) -> str:
        return git(self.root, "rev-parse", "-q", "--verify", f"refs/sandbox/heads/{branch}", check=False)


@pytest.fixture
def sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TwoSides:
    monkeypatch.setattr(vm_git, "_VERDICTS", {})  # what an earlier test's sync judged is not this one's
    return TwoSides(tmp_path)


def test_a_clean_commit_reaches_the_host_and_moves_its_branch(sides: TwoSides) -> None:
    sides.vm("echo b > b.txt && git add b.txt && git commit -q -m agent")
    agent = sides.vm("git rev-parse HEAD")
    report = sides.sync()
    assert report.fetched == ("refs/sandbox/heads/main",) and report.held == ()
    assert report.host == "moved main" and git(sides.root, "rev-parse", "main") == agent
    assert git(sides.root, "status", "--porcelain") == "", "the index follows the branch; the work tree held it"
    assert held.load(sides.project_dir) == {}


def test_a_gitlink_to_a_planted_repository_is_held_and_runs_nothing(sides: TwoSides) -> None:
    """The VM commits a gitlink whose folder holds a repository with `core.fsmonitor`. The
    sync used to fast-forward over it with `git diff-files`, which ran the fsmonitor on the host."""
    before = git(sides.root, "rev-parse", "main")
    sides.plant_repository("sub")
    sides.vm(f"git update-index --add --cacheinfo 160000,{before},sub && git commit -q -m 'vendor a module'")
    agent = sides.vm("git rev-parse HEAD")

    report = sides.sync()
    assert not sides.marker.exists(), "the sync ran the planted repository's fsmonitor"
    assert report.held == ("main",) and report.fetched == () and report.host == ""
    assert git(sides.root, "rev-parse", "main") == before, "the host's branch stays"
    assert sides.sandbox_ref("main") == "", "a held branch is not under refs/sandbox/heads/"
    kept = held.load(sides.project_dir)["main"]
    assert kept.commit == agent and kept.base == before and kept.reasons == ("a gitlink (submodule) at sub",)
    assert [line.split(":")[0] for line in vm_git.held_lines(sides.project_dir)] == ["main"]
    assert any("held the VM's branch main" in line for line in sides.log)

    git(sides.root, "status")
    git(sides.root, "merge", "--ff-only", "refs/sandbox/heads/main", check=False)  # the advice, followed blindly
    assert not sides.marker.exists(), "the user's own git ran the planted repository's fsmonitor"
    assert sides.sync().settled is False or True  # a second sync with nothing new
    assert len(sides.runtime.exec_calls) > 0 and sides.sandbox_ref("main") == ""
    bundles = [call for call in sides.runtime.exec_calls if "bundle" in call.argv]
    assert len(bundles) == 1, "the held tip is not bundled and judged again while it stays the VM's tip"

    sides.vm("git rm -q --cached sub && git commit -q -m 'no module after all'")
    undone = sides.sync()
    assert undone.held == ("main",), "a change undone by a later commit is still in the history the host would take"
    sides.vm(f"git reset -q --soft {before} && echo w > w.txt && git add w.txt && git commit -q -m 'the work alone'")
    rewritten = sides.sync()
    assert rewritten.fetched == ("refs/sandbox/heads/main",), "once the VM's history holds nothing, it comes in"
    assert held.load(sides.project_dir) == {}


def test_the_held_changes_are_judged_against_what_the_host_has(sides: TwoSides) -> None:
    sides.vm("mkdir -p packages/web && echo 'touch ~/pwned' > packages/web/.envrc && echo x > ok.txt && "
             "git add -A && git commit -q -m 'set up direnv'")
    sides.vm("git switch -q -c feature && mkdir -p .opencode-sandbox && echo 'network: all' "
             "> .opencode-sandbox/config.yaml && git add -A && git commit -q -m 'widen' && git switch -q main")
    sides.vm("git switch -q -c docs main~1 && echo d > docs.txt && git add docs.txt && git commit -q -m docs "
             "&& git switch -q main")
    report = sides.sync()
    assert set(report.held) == {"main", "feature"} and report.fetched == ("refs/sandbox/heads/docs",)
    reasons = {branch: each.reasons for branch, each in held.load(sides.project_dir).items()}
    assert reasons["main"] == ("packages/web/.envrc (a file the host runs)",)
    assert set(reasons["feature"]) == {"packages/web/.envrc (a file the host runs)",
                                       ".opencode-sandbox/config.yaml (this tool's configuration)"}


def test_the_tools_own_git_runs_no_hook_from_the_checkout(sides: TwoSides) -> None:
    """`core.hooksPath` often names a folder of the checkout (`.husky`), which the VM writes; the
    ref updates of the sync would run its `reference-transaction` hook."""
    git(sides.root, "config", "core.hooksPath", ".husky")
    sides.vm(f"mkdir -p .husky && printf '#!/bin/sh\\n[ -n \"$IN_THE_VM\" ] || touch {sides.marker}\\n' "
             "> .husky/reference-transaction && "
             "chmod +x .husky/reference-transaction && echo b > b.txt && git add b.txt && "
             "git -c core.hooksPath=/dev/null commit -q -m agent")
    report = sides.sync()
    assert report.fetched == ("refs/sandbox/heads/main",) and report.host == "moved main", \
        "two refs were set on the host, each a reference transaction"
    assert not sides.marker.exists(), "the sync ran a hook the VM wrote"


def test_the_fast_forward_compares_the_changed_files_by_their_content_alone(sides: TwoSides) -> None:
    root = sides.root
    start = git(root, "rev-parse", "HEAD")

    def moves() -> str:
        return fast_forward(root, sides.found.git_dir, "refs/sandbox/heads/", "test", (), "sha1")

    agent_commit = sides.agent_commit
    exe = agent_commit("printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh && ln -s a.txt link && rm a.txt")
    assert moves() == "moved main" and git(root, "rev-parse", "main") == exe
    assert git(root, "status", "--porcelain") == ""

    other = agent_commit("echo c > c.txt")
    (root / "c.txt").write_text("changed on the host\n")
    assert moves() == "differs main"
    (root / "c.txt").write_text("c\n")
    os.chmod(root / "c.txt", 0o755)
    assert moves() == "differs main", "the executable bit is part of the commit"
    os.chmod(root / "c.txt", 0o644)
    (root / ".git" / "MERGE_HEAD").write_text(exe + "\n")
    assert moves() == "busy main"
    (root / ".git" / "MERGE_HEAD").unlink()
    (root / "c.txt").write_text("staged by the user\n")
    git(root, "add", "c.txt")
    (root / "c.txt").write_text("c\n")
    assert moves() == "staged main", "what the user staged at a path the commit changes is theirs"
    git(root, "reset", "-q", "c.txt")
    (root / "d.txt").write_text("d\n")
    git(root, "add", "d.txt")
    assert moves() == "moved main" and git(root, "rev-parse", "main") == other
    assert git(root, "status", "--porcelain") == "A  d.txt", "what is staged elsewhere stays staged"
    git(root, "commit", "-q", "--allow-empty", "-m", "host side")
    agent_commit("echo e > e.txt")
    assert moves() == "diverged main"
    assert start != exe


def test_a_gitlink_on_the_host_branch_is_never_fast_forwarded(sides: TwoSides) -> None:
    """However a commit with a gitlink came under refs/sandbox/heads/, the move judges it again."""
    head = git(sides.root, "rev-parse", "HEAD")
    sides.agent_commit("true", "--add", "--cacheinfo", f"160000,{head},sub")
    sides.plant_repository("sub")
    assert fast_forward(sides.root, sides.found.git_dir, "refs/sandbox/heads/", "test", (), "sha1") == "held main"
    assert not sides.marker.exists()


def test_the_branches_brought_in_are_capped_with_the_checked_out_one_first(sides: TwoSides) -> None:
    sides.vm("for n in $(seq 1 30); do git branch b$n; done && echo b > b.txt && git add b.txt && "
             "git commit -q -m agent")
    report = sides.sync(branch_limit=5)
    assert report.left_out == 26 and "refs/sandbox/heads/main" in report.fetched and len(report.fetched) == 5
    assert any("past the first 5" in line for line in sides.log)
    listed = git(sides.root, "for-each-ref", "--format=%(refname)", "refs/sandbox/heads/").split()
    assert len(listed) == 5


def test_the_standing_of_the_capped_number_of_branches_is_told_within_a_second(sides: TwoSides) -> None:
    """5,000 VM branches once took `guard status` 12 s; the cap keeps 200, each of them differing."""
    sides.vm(f"echo b > b.txt && git add b.txt && git commit -q -m agent && "
             f"for n in $(seq 1 {vm_git.BRANCH_LIMIT + 50}); do git branch b$n; done")
    assert sides.sync().left_out == 51
    git(sides.root, "commit", "-q", "--allow-empty", "-m", "the host moves on")
    head = git(sides.root, "rev-parse", "HEAD")
    subprocess.run(["git", "update-ref", "--stdin"], cwd=sides.root, check=True, text=True,
                   input="".join(f"create refs/heads/b{n} {head}\n" for n in range(1, vm_git.BRANCH_LIMIT + 51)))
    started = time.monotonic()
    lines = vm_git.standing(sides.root)
    assert time.monotonic() - started < 1.0
    assert len(lines) == vm_git.BRANCH_LIMIT
    assert lines[0] == "main: the host is 1 commit(s) ahead; the VM sees them as host/main"
    assert sum("differs from the VM's" in line for line in lines) == vm_git.BRANCH_LIMIT - vm_git.COUNTED_BRANCHES


def test_a_bundle_larger_than_the_bound_is_refused_by_its_size_and_leaves_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "vm-git"
    folder.mkdir()
    with open(folder / "swollen", "wb") as handle:
        handle.truncate(3 * 1024**3)  # sparse: the VM's cost is nothing
    target = tmp_path / "copy"
    with pytest.raises(GitSyncError, match="more than the 1048576 the host copies"):
        bundle_copy.copy_bundle(folder, "swollen", target, limit=1024 * 1024)
    assert not target.exists()
    os.symlink("/etc/passwd", folder / "link")
    with pytest.raises(OSError):
        bundle_copy.copy_bundle(folder, "link", target)
    os.mkfifo(folder / "pipe")
    with pytest.raises(GitSyncError, match="not a regular file"):
        bundle_copy.copy_bundle(folder, "pipe", target)
    (folder / "small").write_bytes(b"# v2 git bundle\n")
    assert bundle_copy.copy_bundle(folder, "small", target).read_bytes() == b"# v2 git bundle\n"


def test_a_bundle_that_grows_while_copied_is_cut_off_at_the_bound() -> None:
    copy = io.BytesIO()
    with pytest.raises(GitSyncError, match="grew past"):
        bundle_copy._copy_within(io.BytesIO(b"x" * 5000), copy, 4096)
    assert len(copy.getvalue()) <= 4096


def test_a_failed_bundle_copy_leaves_no_file_in_the_state_folder(sides: TwoSides,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_copy, "BUNDLE_LIMIT", 10)
    monkeypatch.setattr(bundle_copy.copy_bundle, "__defaults__", (10,))
    sides.vm("echo b > b.txt && git add b.txt && git commit -q -m agent")
    report = vm_git.sync_project(sides.runtime, VM, sides.root, sides.project_dir, sides.log.append,
                                 git_paths(sides.root))
    assert report.fetched == ()
    assert any("more than the 10 the host copies" in line for line in sides.log), sides.log
    assert not list(sides.project_dir.glob("incoming-*")), "nothing of the copy is left"
    assert not list(sides.found.state.glob("bundle.opencode-sandbox.*")), "nor of the VM's bundle"
    assert ProjectLayout(sides.project_dir).git_held.exists() is False


def test_a_change_hidden_in_history_the_host_took_does_not_come_back_under_another_branch(sides: TwoSides) -> None:
    """Commit A adds a gitlink, `.envrc` and `.gitmodules`,
    commit B undoes them. Judged by its tip's tree alone, B fast-forwarded the host's branch, A came
    with it, and a new VM branch pointing at A then seemed to change nothing against the host."""
    before = git(sides.root, "rev-parse", "main")
    sides.vm(f"git update-index --add --cacheinfo 160000,{before},sub && echo 'touch pwned' > .envrc && "
             "printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n' > .gitmodules && "
             "git add .envrc .gitmodules && git commit -q -m A && git rm -q --cached sub .envrc .gitmodules && "
             "rm -f .envrc .gitmodules && echo b > b.txt && git add b.txt && git commit -q -m B")
    a_commit = sides.vm("git rev-parse HEAD~1")
    report = sides.sync()
    assert report.held == ("main",) and report.host == "", "the commits the host would take hold a gitlink"
    assert git(sides.root, "rev-parse", "main") == before
    assert git(sides.root, "merge-base", "--is-ancestor", a_commit, "main", check=False) == ""
    sides.vm(f"git branch feature {a_commit}")
    later = sides.sync()
    assert set(later.held) == {"feature"} and sides.sandbox_ref("feature") == ""
    reasons = set(held.load(sides.project_dir)["main"].reasons)
    assert reasons == {"a gitlink (submodule) at sub", ".envrc (a file the host runs)",
                       ".gitmodules (submodule settings)"}


def test_a_merge_is_judged_by_what_it_changes_against_every_parent(sides: TwoSides) -> None:
    """The VM merging the host's branch into its own brings the user's own changes, which are not
    the VM's to be held for; a merge that adds a gitlink of its own is held."""
    git(sides.root, "commit", "-q", "--allow-empty", "-m", "host side")
    (sides.root / ".envrc").write_text("the user's own\n")
    git(sides.root, "add", ".envrc")
    git(sides.root, "commit", "-q", "-m", "the user's direnv")
    host = git(sides.root, "rev-parse", "HEAD")
    sides.sync()
    sides.vm("echo v > v.txt && git add v.txt && git commit -q -m vm && "
             "git -c core.hooksPath=/dev/null merge -q --no-edit host/main")
    assert sides.sync().held == (), "the user's own .envrc came through the merge from the host's side"
    sides.vm(f"git reset -q --hard HEAD~1 && git merge -q --no-commit host/main && "
             f"git update-index --add --cacheinfo 160000,{host},evil && git commit -q -m 'evil merge'")
    assert sides.sync().held == ("main",), "a gitlink the merge itself adds is held"


def test_a_tree_that_names_millions_of_paths_is_held_whole_within_the_bound(sides: TwoSides) -> None:
    """One folder shared by every level makes 10^6 paths in a bundle of a kilobyte; judging it
    path by path took 15 s and 745 MB per branch."""
    script = ("leaf=$(printf 'touch pwned\\n' | git hash-object -w --stdin) && "
              "t=$(printf '100644 blob %s\\t.envrc\\n' $leaf | git mktree) && "
              "for level in 1 2 3; do t=$(for n in $(seq 1 100); do printf '040000 tree %s\\td%s\\n' $t $n; done "
              "| git mktree); done && git reset -q --soft $(git commit-tree -p HEAD -m bomb $t) && git rev-parse HEAD")
    bomb = sides.vm(script)
    started = time.monotonic()
    report = sides.sync()
    assert time.monotonic() - started < 30
    assert report.held == ("main",)
    assert held.load(sides.project_dir)["main"].commit == bomb
    assert held.load(sides.project_dir)["main"].reasons[0].endswith("(a file the host runs)") or \
        held.load(sides.project_dir)["main"].reasons == ("more new commits or changed paths than the host judges "
                                                          "(the VM's history is held whole)",)
    assert ProjectLayout(sides.project_dir).git_held.stat().st_size < 64 * 1024


def test_a_gitlink_from_an_older_commit_of_the_host_is_held_when_the_vm_brings_it_back(sides: TwoSides) -> None:
    """The host once had a submodule `lib` (commit O) and removed it. Judged by its new commits
    alone, a VM merge taking `lib` from O, or a commit on top of O, changed nothing new: `lib` came
    from a commit the host has. Switching to such a branch puts the gitlink back in the work tree,
    where the VM keeps a `lib/.git` of its own."""
    root = sides.root
    head = git(root, "rev-parse", "HEAD")
    (root / ".gitmodules").write_text('[submodule "lib"]\n\tpath = lib\n\turl = ./lib\n')
    git(root, "add", ".gitmodules")
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{head},lib")
    git(root, "commit", "-q", "-m", "O: a submodule")
    old = git(root, "rev-parse", "HEAD")
    git(root, "rm", "-q", "--cached", "lib", ".gitmodules")
    (root / ".gitmodules").unlink()
    git(root, "commit", "-q", "-m", "R: no submodule")
    sides.sync()
    sides.vm(f"t=$( (git ls-tree HEAD; git ls-tree {old} lib .gitmodules) | git mktree) && "
             f"git branch merged $(git commit-tree -p HEAD -p {old} -m merge $t) && "
             f"git branch on-top $(git commit-tree -p {old} -m 'on top' $(git rev-parse {old}^{{tree}})) && "
             f"git branch pointed {old}")
    report = sides.sync()
    assert set(report.held) == {"merged", "on-top"}, report
    assert sides.sandbox_ref("merged") == "" and sides.sandbox_ref("on-top") == ""
    assert "a gitlink (submodule) at lib" in held.load(sides.project_dir)["on-top"].reasons
    assert sides.sandbox_ref("pointed") == old, "a branch at a commit the host has brings nothing new"


def test_one_sync_reads_a_bounded_amount_and_the_next_goes_on(sides: TwoSides, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many branches, each changing as many paths as one judgment may read: one sync held the
    guard's round for minutes. Past its budget a sync leaves the rest for the next."""
    from opencode_sandbox.services.git_sync import trees

    monkeypatch.setattr(trees, "SYNC_BUDGET", 2 * 1024)
    sides.vm("for n in 1 2 3 4 5; do git switch -q -c b$n main && mkdir d$n && "
             "for f in $(seq 1 20); do echo $f > d$n/file-with-a-longer-name-$f.txt; done && "
             "git add d$n && git commit -q -m b$n; done && git switch -q main")
    first = sides.sync()
    assert 0 < len(first.fetched) < 5 and not first.settled
    assert any("wait for the next sync" in line for line in sides.log), sides.log
    fetched = set(first.fetched)
    for _ in range(5):
        fetched |= set(sides.sync().fetched)
    assert {f"refs/sandbox/heads/b{n}" for n in range(1, 6)} <= fetched
