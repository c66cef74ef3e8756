"""The isolated mode's work tree in the VM, made once from the host's checkout.

The host takes a snapshot of its own work tree (its checked-out commit plus the user's uncommitted
changes, ignored files left out) as a commit of its own, `refs/sandbox/base/<branch>`, and sends
that history to the VM as a pack on the exec's standard input. The VM checks out the commit the
host had checked out and lays the snapshot over it unstaged, so the agent starts from what the
user sees. Nothing of the VM is read here: the host only writes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.workspace import BASE_PREFIX, DETACHED, WORK_TARGET
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.host_git import SYNC_TIMEOUT_S, GitSyncError

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime

SEED_MESSAGE = "opencode-sandbox: your checkout when the VM's work tree was made"

SNAPSHOT_AUTHOR = ("-c", "user.name=opencode-sandbox", "-c", "user.email=host@opencode-sandbox.invalid")
"""The host's snapshots are the tool's commits, not the user's (who may have no identity set)."""

HAS_WORK_TREE = 'test -e "$1/.git"'

SEED_SCRIPT = r"""
set -eu
head=$1 snapshot=$2 branch=$3 name=$4 email=$5
cd /workspace
if git rev-parse -q --verify refs/sandbox/seed >/dev/null 2>&1; then
  echo kept
  exit 0
fi
git init -q .
IFS= read -r size
head -c "$size" | git index-pack --stdin --fix-thin >/dev/null
git update-ref refs/sandbox/seed "$snapshot"
if [ "$branch" != HEAD ]; then
  git symbolic-ref HEAD "refs/heads/$branch"
fi
[ -z "$name" ] || git config user.name "$name"
[ -z "$email" ] || git config user.email "$email"
git read-tree -u --reset "$snapshot"
if [ -n "$head" ]; then
  if [ "$branch" != HEAD ]; then
    git update-ref "refs/heads/$branch" "$head"
    git update-ref "refs/remotes/host/$branch" "$head"
  else
    git update-ref --no-deref HEAD "$head"
  fi
  git reset -q
else
  rm -f .git/index
fi
"""
"""In the VM, as dev: the pack into a new repository at /workspace, the host's commit checked out,
the snapshot's files laid over it and left unstaged (untracked where the commit has no such file).
A work tree a seed already made is kept as it is (`kept`): the state folder that records the seed
may have been removed, the VM's work never is."""


def checked_out_branch(root: Path) -> str:
    """The host's checked-out branch, `HEAD` when detached."""
    name = host_git.text(root, "symbolic-ref", "-q", "--short", "HEAD")
    return name or DETACHED


def snapshot(root: Path) -> tuple[str, str]:
    """A commit of the host's work tree as `git add -A` sees it, on top of HEAD; returns (HEAD or "",
    the snapshot)."""
    head = host_git.text(root, "rev-parse", "-q", "--verify", "HEAD^{commit}")
    with tempfile.TemporaryDirectory(prefix="opencode-sandbox-seed-") as folder:
        index = Path(folder) / "index"
        if head:
            host_git.run(root, "read-tree", head, index_file=index)
        host_git.run(root, "add", "-A", index_file=index)
        tree = host_git.run(root, "write-tree", index_file=index).stdout.decode().strip()
    parents = ["-p", head] if head else []
    made = host_git.text(root, *SNAPSHOT_AUTHOR, "commit-tree", tree, *parents, "-m", SEED_MESSAGE)
    if not made:
        raise GitSyncError("git commit-tree made no snapshot of the checkout")
    return head, made


def pack_of(root: Path, tips: list[str], known: list[str]) -> bytes:
    """The objects of `tips` the other side lacks (it has `known`), as one pack."""
    wanted = "".join(f"{tip}\n" for tip in tips) + "".join(f"^{each}\n" for each in known)
    return host_git.run(root, "pack-objects", "--stdout", "--thin", "--revs", "-q", stdin=wanted.encode()).stdout


def has_work_tree(runtime: Runtime, vm: str) -> bool:
    result = runtime.exec(vm, ["sh", "-c", HAS_WORK_TREE, "has", WORK_TARGET], timeout_s=SYNC_TIMEOUT_S)
    return result.exit_code == 0


def seed(runtime: Runtime, vm: str, root: Path) -> str:
    """Make the VM's work tree from the host's checkout; the branch it is on, empty when the VM
    already had one."""
    branch = checked_out_branch(root)
    head, made = snapshot(root)
    pack = pack_of(root, [made], [])
    name = host_git.text(root, "config", "user.name")
    email = host_git.text(root, "config", "user.email")
    result = runtime.exec(vm, ["sh", "-c", SEED_SCRIPT, "seed", head, made, branch, name, email],
                          stdin=f"{len(pack)}\n".encode() + pack, timeout_s=SYNC_TIMEOUT_S)
    if result.exit_code != 0:
        raise GitSyncError(f"making the VM's work tree failed: {result.stderr.strip()[-300:]}")
    if result.stdout.strip() == "kept":
        return ""
    host_git.run(root, "update-ref", "-m", SEED_MESSAGE, BASE_PREFIX + branch, made)  # what the VM starts from
    return branch
