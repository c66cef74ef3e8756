"""The VM's own git directory, on the host side: made once in the project's private state
folder, mounted into the VM, and kept in step with the host's repository.

The host's git only ever runs in the host's own repository. What the VM made reaches it as a
bundle written by git in the VM, copied out without following a link and fetched with every
object checked; the VM's refs and HEAD are read through an exec and validated as data. See
docs/git.md for the rules the two sides follow.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_commits import HeldBranch, capped, held_line, summary
from opencode_sandbox.core.vm_git import (
    HOST_OBJECTS,
    HOST_PREFIX,
    SANDBOX_PREFIX,
    SEED_FOLDERS,
    VM_GIT_DIR,
    HostFacts,
    bundle_exclusions,
    fast_forward_outcome,
    nothing_pending,
    parse_refs,
    plan_sync,
    read_bundle_header,
    seed_files,
    valid_ref,
)
from opencode_sandbox.runtime.types import ExecResult, Mount, MountKind, SandboxStatus
from opencode_sandbox.services.git_sync import held as held_store
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.host_git import SYNC_TIMEOUT_S, GitSyncError
from opencode_sandbox.state.files import (
    FILE_MODE,
    UnreadableState,
    ensure_private_dir,
    read_yaml_mapping,
    write_atomic,
)
from opencode_sandbox.state_layout import ProjectLayout

if TYPE_CHECKING:
    from typing import BinaryIO

    from opencode_sandbox.project import GitPaths
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.ui.console import Console

__all__ = ["SYNC_TIMEOUT_S", "GitSyncError"]  # known to the callers by this module

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
BRANCH_LIMIT = 200
"""The most VM branches one project's sync brings to the host (`git-sync-branches`)."""

FAST_FORWARD = r"""
set -eu
prefix=$1 message=$2
branch=$(git symbolic-ref -q --short HEAD) || exit 0
new=$(git rev-parse -q --verify "$prefix$branch^{commit}") || exit 0
old=$(git rev-parse -q --verify HEAD) || exit 0
[ "$old" != "$new" ] || exit 0
! git merge-base --is-ancestor "$new" "$old" || exit 0
for busy in MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD BISECT_LOG rebase-merge rebase-apply; do
  [ ! -e "$(git rev-parse --git-path "$busy")" ] || { echo "busy $branch"; exit 0; }
done
git merge-base --is-ancestor "$old" "$new" || { echo "diverged $branch"; exit 0; }
git diff --cached --quiet || { echo "staged $branch"; exit 0; }
scratch="$(git rev-parse --git-dir)/index.opencode-sandbox.$$"
trap 'rm -f "$scratch"' EXIT
GIT_INDEX_FILE=$scratch git read-tree "$new"
GIT_INDEX_FILE=$scratch git update-index -q --refresh >/dev/null || true
GIT_INDEX_FILE=$scratch git diff-files --quiet || { echo "differs $branch"; exit 0; }
git update-ref -m "$message" "refs/heads/$branch" "$new" "$old"
git reset -q
echo "moved $branch"
"""
"""In the VM: moves its checked-out branch to `$1<branch>` when that only adds commits, nothing
is staged, and the work tree already holds the new commit; says what it did or why not. The host
moves its own branch by comparing object data instead (`git_sync/fast_forward.py`)."""

VM_REFS = ('sh -c "$1" fast-forward "$2" "$3"; '
           "git for-each-ref --format='%(objectname) %(refname)' refs/heads refs/remotes/host")
"""Every sync: the VM's branch catches up with the host's where it can (saying how it went), then
its refs are read."""

STAMPED = (("git_dir", ("HEAD",)), ("common_dir", ("packed-refs", "refs", "reftable")),
           ("state", ("HEAD", "packed-refs", "refs", "reftable")))
"""Where each side keeps its refs and checked-out branch: the host's git directory (a linked
worktree's own HEAD), its common directory, and the VM's git directory."""
STAMP_ENTRY_LIMIT = 20_000
STAMP_DEPTH_LIMIT = 32
"""Beyond this many entries, or folders this deep, the stamp says nothing and every sync looks:
the VM makes its folders, and must not make the walk endless or exhaust the launcher's stack."""
RACY_S = 2.0
"""A stamp with a change this recent says nothing: some file systems keep times too coarse to
tell a change from the next one within it (git's own rule for its index)."""


class Layout(Record):
    """Where the two git directories are, for one checkout."""

    root: Path
    git_dir: Path
    """The host's git directory of this checkout (a worktree's own one, for a linked worktree)."""
    common_dir: Path
    state: Path
    """The VM's git directory, in the private state folder."""
    gitfile: bool
    """The checkout's `.git` is a file: the VM's git directory is mounted beside the checkout."""
    object_format: str = "sha1"

    @property
    def vm_git_dir(self) -> str:
        return VM_GIT_DIR if self.gitfile else "/workspace/.git"


VERDICTS_KEPT = 4096
_VERDICTS: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}
"""What each tip was judged, by the host's branch it was judged against and the guarded paths: a
process that syncs again (the idle reaper) judges a tip once."""


class SyncReport(Record):
    fetched: tuple[str, ...] = ()
    """The VM's branches now on the host (full `refs/sandbox/heads/` names)."""
    held: tuple[str, ...] = ()
    """The VM's branches this sync held (names without `refs/heads/`)."""
    left_out: int = 0
    """The VM's branches past `git-sync-branches`, not brought in."""
    host: str = ""
    """What became of the host's checked-out branch: `moved B`, `diverged B`, ... or nothing."""
    vm: str = ""
    """The same for the VM's checked-out branch."""
    settled: bool = False
    """Nothing waits for a later sync (see `nothing_pending`)."""
    failure: str = ""
    """Why the sync failed, leaving both sides as they were; empty when it did not."""


def layout(root: Path, project_dir: Path, paths: GitPaths | None) -> Layout | None:
    """The checkout's arrangement from git's answer (`project.git_paths`, asked once per command);
    None where git gave none: a folder that is not a git checkout, or one git refuses to read."""
    if paths is None:
        return None
    entry = root / ".git"
    return Layout(root, paths.git_dir, paths.common_dir, ProjectLayout(project_dir).vm_git,
                  entry.is_file() and not entry.is_symlink(), paths.object_format)


def mounts(found: Layout) -> list[Mount]:
    """The VM's git directory read-write, the host's objects read-only; for a linked worktree
    a `.git` file pointing at the VM's git directory, read-only over the checkout's."""
    shared = [Mount(MountKind.BIND, str(found.common_dir / "objects"), HOST_OBJECTS, readonly=True)]
    if not found.gitfile:
        return [Mount(MountKind.BIND, str(found.state), "/workspace/.git"), *shared]
    return [Mount(MountKind.BIND, str(found.state), VM_GIT_DIR),
            Mount(MountKind.BIND, str(ProjectLayout(found.state.parent).gitfile), "/workspace/.git", readonly=True),
            *shared]


def host_facts(found: Layout) -> HostFacts:
    git = found.root
    object_format = found.object_format
    head_ref = host_git.run(git, "symbolic-ref", "-q", "HEAD", check=False).stdout.decode(errors="replace").strip()
    if head_ref.startswith("refs/heads/") and valid_ref(head_ref):
        head = f"ref: {head_ref}"
    else:
        head = host_git.run(git, "rev-parse", "-q", "--verify", "HEAD", check=False).stdout.decode().strip()
        head = head or "ref: refs/heads/main"
    refs_text = host_git.run(git, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags")
    refs = {**parse_refs(refs_text.stdout.decode(errors="replace"), object_format, "refs/heads/"),
            **parse_refs(refs_text.stdout.decode(errors="replace"), object_format, "refs/tags/")}
    listed = host_git.run(git, "config", "--local", "-z", "--list", check=False).stdout.decode(errors="replace")
    config = tuple((key, value) for key, _, value in (item.partition("\n") for item in listed.split("\0") if item))
    return HostFacts(head=head, object_format=object_format, refs=refs, config=config,
                     shallow=_read_text(found.common_dir / "shallow"),
                     exclude=_read_text(found.common_dir / "info" / "exclude"))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def ensure_seeded(found: Layout) -> bool:
    """Make the VM's git directory when there is none; True when made now. Plain files are
    written, never git run in it: from its first boot on the folder is the VM's to change."""
    if found.gitfile:
        _write_private(ProjectLayout(found.state.parent).gitfile, f"gitdir: {VM_GIT_DIR}\n".encode())
    if found.state.exists() or found.state.is_symlink():
        return False
    import shutil  # only where the VM's git directory is made or its commits come back

    ensure_private_dir(found.state.parent)
    staging = ProjectLayout(found.state.parent).vm_git_staging()
    os.mkdir(staging, 0o700)
    try:
        for folder in SEED_FOLDERS:
            (staging / folder).mkdir(parents=True, exist_ok=True)
        for path, text in seed_files(host_facts(found)).items():
            _write_private(staging / path, text.encode())
        _copy_index(found, staging)
        os.rename(staging, found.state)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if found.state.is_dir() and not found.state.is_symlink():
            return False  # another start made it meanwhile
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def _copy_index(found: Layout, staging: Path) -> None:
    """The host's index, so the VM sees what is staged; a split index (its shared part lives
    beside it) is rebuilt in the VM instead."""
    if any(found.git_dir.glob("sharedindex.*")):
        return
    import shutil

    with contextlib.suppress(FileNotFoundError):
        shutil.copyfile(found.git_dir / "index", staging / "index")


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def finish_seed(runtime: Runtime, vm: str, found: Layout) -> None:
    """In a VM whose git directory was made without an index: build it from HEAD."""
    result = runtime.exec(vm, ["sh", "-c", "test -e \"$1/index\" || git reset -q", "seed", found.vm_git_dir],
                          timeout_s=SYNC_TIMEOUT_S)
    if result.exit_code != 0:
        raise GitSyncError(f"building the VM's git index failed: {result.stderr.strip()}")


class Syncer:
    """One project's sync, in both directions; `log` hears every move it makes. `guarded`: the
    paths the host runs (the guard's record), whose change holds a VM branch; `branch_limit`: the
    most VM branches brought in."""

    def __init__(self, runtime: Runtime, vm: str, found: Layout, log: Callable[[str], None],
                 guarded: Sequence[str] = (), branch_limit: int = BRANCH_LIMIT) -> None:
        self.runtime = runtime
        self.vm = vm
        self.found = found
        self.log = log
        self.guarded = tuple(guarded)
        self.branch_limit = branch_limit
        self.project_dir = found.state.parent
        self._object_format = found.object_format
        from opencode_sandbox.services.git_sync.trees import SYNC_BUDGET, JudgingBudget

        self._budget = JudgingBudget(SYNC_BUDGET)

    def sync(self) -> SyncReport:
        vm_refs, vm_caught_up = self._vm_refs()
        every_head = {name: object_id for name, object_id in vm_refs.items() if name.startswith("refs/heads/")}
        checked_out = host_git.text(self.found.root, "symbolic-ref", "-q", "HEAD")
        vm_heads, left_out = capped(every_head, [checked_out], self.branch_limit)
        if left_out:
            self.log(f"the VM has {len(every_head)} branches; {left_out} past the first {self.branch_limit} "
                     "are not brought to the host (`git-sync-branches` sets how many are)")
        held = {branch: each for branch, each in held_store.load(self.project_dir).items()
                if vm_heads.get(f"refs/heads/{branch}") == each.commit}
        fetchable = {name: object_id for name, object_id in vm_heads.items()
                     if name.removeprefix("refs/heads/") not in held}
        sandbox = self._host_refs(SANDBOX_PREFIX)
        host_heads = self._host_refs("refs/heads/")
        plan = plan_sync(fetchable, sandbox)
        for name in plan.drop:  # first: a branch renamed to `name/...` needs `name` gone
            host_git.run(self.found.root, "update-ref", "-d", name, sandbox.pop(name))
            self.log(f"{name}: {self._why_dropped(name.removeprefix(SANDBOX_PREFIX), held, every_head)}")
        fetched: list[str] = []
        newly_held: dict[str, HeldBranch] = {}
        if plan.fetch:
            fetched, newly_held = self._bring_in(plan.fetch, fetchable, [*host_heads.values(), *sandbox.values()])
        held.update(newly_held)
        held_store.save(self.project_dir, held)
        for name in plan_sync({name: object_id for name, object_id in fetchable.items()
                               if name.removeprefix("refs/heads/") not in newly_held}, sandbox).drop:
            host_git.run(self.found.root, "update-ref", "-d", name, sandbox[name])
            self.log(f"{name}: {self._why_dropped(name.removeprefix(SANDBOX_PREFIX), held, every_head)}")
        host_moved = self._fast_forward_host()
        if host_moved.startswith("moved"):
            host_heads = self._host_refs("refs/heads/")
        vm_moved = self._send_host_heads(host_heads, vm_refs) or vm_caught_up
        return SyncReport(tuple(fetched), tuple(newly_held), left_out, host_moved, vm_moved,
                          nothing_pending((host_moved, vm_moved), len(plan.fetch), len(fetched) + len(newly_held)))

    def _why_dropped(self, branch: str, held: Mapping[str, HeldBranch], every_head: Mapping[str, str]) -> str:
        if branch in held:
            return "removed, the VM's branch is held"
        if f"refs/heads/{branch}" in every_head:
            return f"removed, the VM's branch is past the first {self.branch_limit} (`git-sync-branches`)"
        return "the VM's branch is gone"

    def _vm_refs(self) -> tuple[dict[str, str], str]:
        result = self.runtime.exec(self.vm, ["sh", "-c", VM_REFS, "refs", FAST_FORWARD, HOST_PREFIX,
                                             "opencode-sandbox: fast-forward to the host's commits"],
                                   timeout_s=SYNC_TIMEOUT_S)
        if result.exit_code != 0:
            raise GitSyncError(f"reading the VM's branches failed: {result.stderr.strip()[-300:]}")
        return ({**parse_refs(result.stdout, self._object_format, "refs/heads/"),
                 **parse_refs(result.stdout, self._object_format, HOST_PREFIX)}, fast_forward_outcome(result.stdout))

    def _host_refs(self, prefix: str) -> dict[str, str]:
        listed = host_git.run(self.found.root, "for-each-ref", "--format=%(objectname) %(refname)", prefix)
        return parse_refs(listed.stdout.decode(errors="replace"), self._object_format, prefix)

    def _bring_in(self, branches: Sequence[str], vm_heads: Mapping[str, str],
                  known: Sequence[str]) -> tuple[list[str], dict[str, HeldBranch]]:
        """The VM's new branch tips as `refs/sandbox/heads/*`: those whose commits the host has
        are pointed at directly, the rest come in a bundle whose objects are checked first. A tip
        whose changes the host must not take as they are is held instead (`core/vm_commits.py`)."""
        have = self._host_has([vm_heads[name] for name in branches])
        tips = {name: vm_heads[name] for name in branches if vm_heads[name] in have}
        missing = [name for name in branches if name not in tips]
        if missing:
            tips.update(self._fetch_bundle(missing, known))  # a branch the bundle lacks waits for the next sync
        from opencode_sandbox.services.git_sync.trees import Deferred

        held: dict[str, HeldBranch] = {}
        deferred = 0
        for name, object_id in list(tips.items()):
            branch = name.removeprefix("refs/heads/")
            try:
                judged = self._judged(branch, object_id)
            except Deferred:
                deferred += 1
                del tips[name]
                continue
            if judged is not None:
                held[branch] = judged
                del tips[name]
                self.log(f"held the VM's branch {branch} at {object_id[:12]}: it changes {summary(judged.reasons)}")
        if deferred:
            self.log(f"{deferred} of the VM's branches wait for the next sync: this one read all it may of what "
                     "their commits change")
        updates = "".join(f"update {SANDBOX_PREFIX}{name.removeprefix('refs/heads/')} {object_id}\n"
                          for name, object_id in tips.items())
        if updates:
            host_git.run(self.found.root, "update-ref", "-m", "opencode-sandbox: the VM's branch", "--stdin",
                         stdin=updates.encode())
        for name, object_id in tips.items():
            self.log(f"{SANDBOX_PREFIX}{name.removeprefix('refs/heads/')} is now {object_id[:12]}")
        return [SANDBOX_PREFIX + name.removeprefix("refs/heads/") for name in tips], held

    def _judged(self, branch: str, tip: str) -> HeldBranch | None:
        """The tip as held, with why, when what it brings is what the host must not take as it is;
        None when it may. `Deferred` when this sync's budget for judging is spent."""
        from opencode_sandbox.services.git_sync.trees import host_side, judged_base, reasons_to_hold

        key = (tip, host_side(self.found.root, branch), self.guarded)
        if key not in _VERDICTS:
            if len(_VERDICTS) >= VERDICTS_KEPT:
                _VERDICTS.clear()
            _VERDICTS[key] = tuple(reasons_to_hold(self.found.root, tip, branch, self.guarded, self._budget))
        reasons = _VERDICTS[key]
        if not reasons:
            return None
        return HeldBranch(tip, judged_base(self.found.root, tip, branch, self._object_format), reasons)

    def _host_has(self, object_ids: Sequence[str]) -> set[str]:
        if not object_ids:
            return set()
        checked = host_git.run(self.found.root, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                               stdin="".join(f"{object_id}\n" for object_id in object_ids).encode())
        return {line.split()[0] for line in checked.stdout.decode(errors="replace").splitlines()
                if line.endswith(" commit")}

    def _fetch_bundle(self, branches: Sequence[str], known: Sequence[str]) -> dict[str, str]:
        """The branches' tips as the VM bundled them, their objects now in the host's store."""
        from opencode_sandbox.services.git_sync.bundle_copy import copy_bundle

        name = f"bundle.opencode-sandbox.{os.urandom(8).hex()}"
        wanted = "".join(f"{branch}\n" for branch in branches)
        negatives = "".join(f"{line}\n" for line in bundle_exclusions(known))
        made = self.runtime.exec(
            self.vm, ["sh", "-c", 'umask 077; git bundle create -q "$1" --stdin', "bundle",
                      f"{self.found.vm_git_dir}/{name}"],
            stdin=(wanted + negatives).encode(), timeout_s=SYNC_TIMEOUT_S)
        try:
            if made.exit_code != 0:
                raise GitSyncError(f"the VM could not bundle its commits: {made.stderr.strip()[-300:]}")
            copy = copy_bundle(self.found.state, name, ProjectLayout(self.project_dir).incoming_bundle())
        finally:
            self._remove_in_state(name)
        try:
            return self._index_bundle(copy, branches)
        finally:
            copy.unlink(missing_ok=True)

    def _index_bundle(self, bundle: Path, branches: Sequence[str]) -> dict[str, str]:
        """Every object of the bundle checked (`index-pack --strict`) into the host's store;
        the tips it names for `branches`, each a commit the host now has."""
        from opencode_sandbox.services.git_sync import daily_quota

        daily_quota.take(self.project_dir, bundle.stat().st_size)
        with bundle.open("rb") as handle:
            header = read_bundle_header(handle, self._object_format)
            os.lseek(handle.fileno(), handle.tell(), os.SEEK_SET)  # past the read-ahead: the pack starts here
            tips = {name: object_id for name, object_id in header.items() if name in branches}
            indexed = index_pack(self.found.root, handle)
        if indexed.returncode != 0:
            raise GitSyncError(f"the VM's bundle failed the object checks: "
                               f"{indexed.stderr.decode(errors='replace').strip()[-300:]}")
        written = self._pack_written(indexed.stdout)
        if written > bundle.stat().st_size:  # a thin pack is completed with the host's own objects
            daily_quota.take(self.project_dir, written - bundle.stat().st_size)
        have = self._host_has(list(tips.values()))
        return {name: object_id for name, object_id in tips.items() if object_id in have}

    def _pack_written(self, said: bytes) -> int:
        """The size of the pack `index-pack` wrote (it prints `pack\t<name>`); 0 when unknown."""
        name = said.decode(errors="replace").strip().rpartition("\t")[2]
        if not name or name.strip("0123456789abcdef"):
            return 0
        try:
            return (self.found.common_dir / "objects" / "pack" / f"pack-{name}.pack").stat().st_size
        except OSError:
            return 0

    def _remove_in_state(self, name: str) -> None:
        with contextlib.suppress(OSError):
            folder = os.open(self.found.state, _DIRECTORY)
            try:
                os.unlink(name, dir_fd=folder)
            finally:
                os.close(folder)

    def _fast_forward_host(self) -> str:
        from opencode_sandbox.services.git_sync.fast_forward import fast_forward

        said = fast_forward(self.found.root, self.found.git_dir, SANDBOX_PREFIX,
                            "opencode-sandbox: fast-forward to the VM's commits", self.guarded, self._object_format)
        if said.startswith("moved"):
            self.log(f"host: {said}")
        return said

    def _send_host_heads(self, host_heads: Mapping[str, str], vm_refs: Mapping[str, str]) -> str:
        lines = host_ref_updates(host_heads, vm_refs)
        if not lines:
            return ""
        script = 'git update-ref --stdin && sh -c "$1" fast-forward "$2" "$3"'
        result = self.runtime.exec(
            self.vm, ["sh", "-c", script, "send", FAST_FORWARD, HOST_PREFIX,
                      "opencode-sandbox: fast-forward to the host's commits"],
            stdin="".join(lines).encode(), timeout_s=SYNC_TIMEOUT_S)
        return self._vm_took_host_heads(result, len(lines))

    def _vm_took_host_heads(self, result: ExecResult, changed: int) -> str:
        """What the VM said of its branch once it has the host's (`moved B`, ...)."""
        if result.exit_code != 0:
            raise GitSyncError(f"passing the host's branches to the VM failed: {result.stderr.strip()[-300:]}")
        said = result.stdout.strip().splitlines()[-1:] if result.stdout.strip() else []
        self.log(f"the VM has the host's branches ({changed} changed){'; vm: ' + said[0] if said else ''}")
        return said[0] if said else ""


def host_ref_updates(host_heads: Mapping[str, str], vm_refs: Mapping[str, str]) -> list[str]:
    """`git update-ref --stdin` lines that make the VM's `host/*` the host's branches."""
    wanted = {HOST_PREFIX + name.removeprefix("refs/heads/"): object_id for name, object_id in host_heads.items()}
    held = {name: object_id for name, object_id in vm_refs.items() if name.startswith(HOST_PREFIX)}
    lines = [f"update {name} {object_id}\n" for name, object_id in sorted(wanted.items())
             if held.get(name) != object_id]
    return lines + [f"delete {name}\n" for name in sorted(held) if name not in wanted]


INDEX_MEMORY_LIMIT = 1536 << 20
"""The address space of `git index-pack` over the VM's objects: an object inflates to the size its
delta declares, which the VM picks (a 65 KB pack can declare gigabytes), so past this the check fails
and the sync brings nothing, rather than the host running out of memory. One thread: the VM's
objects are checked one at a time."""


INDEX_CPU_S = 60
"""Seconds of the host's CPU one check of the VM's objects may take: deltas just under the memory
bound can still be made to take minutes each."""
INDEX_WINDOWS = ("-c", "core.packedGitWindowSize=32m", "-c", "core.packedGitLimit=256m")
"""The host's own packs, read for the bases of the VM's thin pack, in small windows within that space."""


def index_pack(root: Path, pack: BinaryIO) -> subprocess.CompletedProcess[bytes]:
    """`git index-pack --strict` of the VM's pack into the host's store, within `INDEX_MEMORY_LIMIT`."""
    import resource  # noqa: F401  # for `_within_index_memory`, which must not import in the child

    try:
        return subprocess.run(host_git.argv(*INDEX_WINDOWS, "index-pack", "--threads=1", "--stdin", "--fix-thin",
                                            "--strict"),
                              cwd=root, stdin=pack, capture_output=True, check=False, timeout=SYNC_TIMEOUT_S,
                              env=host_git.environment(), preexec_fn=_within_index_memory)
    except subprocess.TimeoutExpired:
        raise GitSyncError(f"checking the VM's objects took longer than {SYNC_TIMEOUT_S:.0f} s") from None


def _within_index_memory() -> None:
    """Run in the child between fork and exec: `resource` is loaded before (`_index_bundle`)."""
    resource = sys.modules["resource"]
    resource.setrlimit(resource.RLIMIT_AS, (INDEX_MEMORY_LIMIT, INDEX_MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (INDEX_CPU_S, INDEX_CPU_S))


def guarded_for_sync(project_dir: Path) -> tuple[str, ...]:
    """The paths the host runs, as the guard last recorded them for the project (its defaults
    before any record: every default name counts in every folder all the same)."""
    from opencode_sandbox.core.guard import DEFAULT_GUARDED
    from opencode_sandbox.services.guard.store import GuardStore

    record = GuardStore(project_dir).load()
    try:
        isolated = read_yaml_mapping(ProjectLayout(project_dir).host_run_paths) or {}
    except UnreadableState:
        isolated = {}
    listed = isolated.get("paths")
    found = [path for path in listed if isinstance(path, str)] if isinstance(listed, list) else []
    return tuple(dict.fromkeys((*DEFAULT_GUARDED, *(record.paths if record is not None else ()), *found)))


def sync_project(runtime: Runtime, vm: str, root: Path, project_dir: Path, log: Callable[[str], None],
                 paths: GitPaths | None, branch_limit: int = BRANCH_LIMIT, work_tree: bool = True,
                 host_moved_only: bool = False) -> SyncReport:
    """Both directions once, for a running VM that works on its own git directory; an empty
    report for any other (an older VM still on the checkout's `.git`: nothing of it is read).
    A failure is logged and leaves both sides as they were. `paths`: git's answer, as `layout`."""
    from opencode_sandbox.core.naming import GIT_OWN, LABEL_GIT
    from opencode_sandbox.errors import SandboxError

    try:
        found = layout(root, project_dir, paths)
        if found is None:
            return SyncReport()
        from opencode_sandbox.core.workspace import ISOLATED

        if recorded_workspace(project_dir) == ISOLATED:
            return _sync_isolated(runtime, vm, found, log, branch_limit, work_tree, host_moved_only)
        if not found.state.is_dir():
            return SyncReport()
        with sync_lock(project_dir):
            stamp = refs_stamp(found)
            recorded = ProjectLayout(project_dir).git_sync_stamp
            if stamp is not None and _read_text(recorded) == stamp:
                return SyncReport(settled=True)
            info = runtime.get_sandbox(vm)
            if info is None or info.status is not SandboxStatus.RUNNING or info.labels.get(LABEL_GIT) != GIT_OWN:
                return SyncReport()
            report = Syncer(runtime, vm, found, log, guarded_for_sync(project_dir), branch_limit).sync()
            if stamp is not None and report.settled:
                write_atomic(recorded, stamp, durable=False)
            return report
    except (GitSyncError, SandboxError, OSError, ValueError) as error:
        failure = str(getattr(error, "message", None) or error)
        log(f"git sync failed: {failure}")
        return SyncReport(failure=failure)


def recorded_workspace(project_dir: Path) -> str | None:
    """The mode the project's VM was made in, as the start recorded it (read here, not in the
    isolated mode's modules, which a start in the shared mode never loads)."""
    try:
        data = read_yaml_mapping(ProjectLayout(project_dir).state) or {}
    except UnreadableState:
        return None
    value = data.get("workspace")
    return value if isinstance(value, str) else None


def _host_stamp(found: Layout) -> str | None:
    host_stamp = refs_stamp(found, HOST_STAMPED)
    return f"isolated {host_stamp}" if host_stamp is not None else None


HOST_STAMPED = (("git_dir", ("HEAD",)), ("common_dir", ("packed-refs", "refs/heads", "refs/tags", "reftable")))
"""The host's own branches, tags and checked-out branch: all a start of the isolated mode looks at
(the sync's own `refs/sandbox/*` are left out, so bringing the VM's work does not make the next
start ask again)."""


def _sync_isolated(runtime: Runtime, vm: str, found: Layout, log: Callable[[str], None],
                   branch_limit: int, work_tree: bool, host_moved_only: bool) -> SyncReport:
    """The isolated mode's sync: nothing on the host tells whether the VM's refs moved, so the VM is
    asked every time, but for `host_moved_only` (a start: the idle reaper brings the VM's work while
    it runs): then only when the host's refs moved since a sync that left nothing pending.
    `work_tree`: the commit of its work tree is made and brought too (its cost grows with the work
    tree)."""
    from opencode_sandbox.core.naming import LABEL_WORKSPACE
    from opencode_sandbox.core.workspace import ISOLATED
    from opencode_sandbox.services.git_sync.isolated import IsolatedSyncer

    project_dir = found.state.parent
    recorded = ProjectLayout(project_dir).git_sync_stamp
    if host_moved_only and (stamp := _host_stamp(found)) is not None and _read_text(recorded) == stamp:
        return SyncReport(settled=True)  # not even the lock: the reaper's sync in progress brings the VM's work
    with sync_lock(project_dir):
        stamp = _host_stamp(found)
        info = runtime.get_sandbox(vm)
        if info is None or info.status is not SandboxStatus.RUNNING or info.labels.get(LABEL_WORKSPACE) != ISOLATED:
            return SyncReport()
        syncer = IsolatedSyncer(runtime, vm, found, log, guarded_for_sync(project_dir), branch_limit)
        syncer.with_work_tree = work_tree
        report = syncer.sync()
        if stamp is not None and report.settled:
            write_atomic(recorded, stamp, durable=False)
        return report


def refs_stamp(found: Layout, stamped: tuple[tuple[str, tuple[str, ...]], ...] = STAMPED) -> str | None:
    """A digest of every entry where the two sides keep their refs, as the file system describes
    it (kind, identity, size and times, read without following a link), so a sync can tell that
    nothing changed since one that left nothing pending; None when it cannot tell."""
    import time

    lines: list[str] = []
    newest = 0
    try:
        for base, names in stamped:
            folder = os.open(getattr(found, base), _DIRECTORY)
            try:
                for name in names:
                    newest = max(newest, _describe(folder, name, f"{base}/{name}", lines, 0))
            finally:
                os.close(folder)
    except (OSError, _TooMany):
        return None
    if newest > time.time_ns() - int(RACY_S * 1e9):
        return None
    from opencode_sandbox.core.digest import sha256

    return sha256("\n".join(lines).encode(errors="surrogateescape")).hexdigest()


class _TooMany(Exception):
    pass


def _describe(folder: int, name: str, path: str, lines: list[str], depth: int) -> int:
    """Appends the entry and, for a folder, everything in it; returns the newest time among them."""
    if len(lines) >= STAMP_ENTRY_LIMIT or depth > STAMP_DEPTH_LIMIT:
        raise _TooMany
    try:
        status = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        lines.append(f"{path} -")
        return 0
    lines.append(f"{path} {status.st_mode:o} {status.st_ino} {status.st_size} {status.st_mtime_ns} "
                 f"{status.st_ctime_ns}")
    newest = max(status.st_mtime_ns, status.st_ctime_ns)
    if stat.S_ISDIR(status.st_mode):
        inner = os.open(name, _DIRECTORY, dir_fd=folder)
        try:
            for entry in sorted(os.listdir(inner)):
                newest = max(newest, _describe(inner, entry, f"{path}/{entry}", lines, depth + 1))
        finally:
            os.close(inner)
    return newest


@contextlib.contextmanager
def sync_lock(project_dir: Path) -> Iterator[None]:
    """One sync at a time per project: the reaper's, a start's and a stop's never interleave."""
    import fcntl

    ensure_private_dir(project_dir)
    descriptor = os.open(ProjectLayout(project_dir).git_sync_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


COUNTED_BRANCHES = 20
"""`standing` counts the commits of this many differing branches (the checked-out one first); the
rest are named with their ref, so `guard status` stays quick however many branches the VM made."""


def standing(root: Path) -> list[str]:
    """How each of the VM's branches stands against the host's branch of the same name, with
    what to run where they differ."""
    try:
        listed = host_git.run(root, "for-each-ref", "--format=%(objectname) %(refname)", SANDBOX_PREFIX,
                              "refs/heads/")
    except GitSyncError:
        return []
    tips: dict[str, str] = {}
    for line in listed.stdout.decode(errors="replace").splitlines():
        object_id, _, ref = line.partition(" ")
        tips[ref] = object_id
    checked_out = host_git.text(root, "symbolic-ref", "-q", "HEAD").removeprefix("refs/heads/")
    refs = sorted((ref for ref in tips if ref.startswith(SANDBOX_PREFIX)),
                  key=lambda ref: (ref.removeprefix(SANDBOX_PREFIX) != checked_out, ref))
    lines: list[str] = []
    counted = 0
    for ref in refs:
        branch = ref.removeprefix(SANDBOX_PREFIX)
        host = f"refs/heads/{branch}"
        if host not in tips:
            lines.append(f"{branch}: only in the VM, kept as {ref} (`git branch {branch} {ref}` makes it yours)")
        elif tips[host] == tips[ref]:
            lines.append(f"{branch}: in step with the VM")
        elif counted >= COUNTED_BRANCHES:
            lines.append(f"{branch}: differs from the VM's, kept as {ref} (`git log {host}...{ref}` shows how)")
        else:
            counted += 1
            lines.append(_compared(root, branch, host, ref))
    return lines


def _compared(root: Path, branch: str, host: str, ref: str) -> str:
    counted = host_git.run(root, "rev-list", "--left-right", "--count", f"{host}...{ref}", "--", check=False)
    numbers = counted.stdout.decode().split()
    if counted.returncode != 0 or len(numbers) != 2:
        return f"{branch}: differs from the VM's, kept as {ref} (`git log {host}...{ref}` shows how)"
    host_only, vm_only = int(numbers[0]), int(numbers[1])
    if not host_only:
        return f"{branch}: the VM is {vm_only} commit(s) ahead, kept as {ref} (`git merge --ff-only {ref}` takes them)"
    if not vm_only:
        return f"{branch}: the host is {host_only} commit(s) ahead; the VM sees them as host/{branch}"
    return (f"{branch}: both moved ({host_only} commit(s) here, {vm_only} in the VM): "
            f"`git merge {ref}` brings them together")


def tell_held(console: Console, project_dir: Path) -> None:
    """Each branch the host holds, told at every start, detach and stop until the user takes it or
    the VM drops the change."""
    for line in held_lines(project_dir):
        console.warn(f"git: {line}")


def held_lines(project_dir: Path) -> list[str]:
    """What the host holds of the VM's branches, and how to look at each and take it."""
    return [held_line(branch, each) for branch, each in sorted(held_store.load(project_dir).items())]
