"""What commits change, read from the host's object store alone, within bounds the VM cannot move.

A VM's branch is judged commit by commit: every commit the host's refs do not reach yet (its own
branches and tags, and the VM's branches already judged), each against its parents (a merge by
the paths it changes against all of them). A change undone by a later commit still counts: the
host's history would hold it, and `git revert`, a checkout of an older commit or a branch the VM
points at it later would bring it back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.core.vm_commits import EMPTY_TREE, TreeChange, held_reasons, parse_diff_tree
from opencode_sandbox.core.vm_git import SANDBOX_PREFIX
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.host_git import TooMuch

COMMIT_LIMIT = 10_000
"""The most new commits of one branch the host judges; past it the branch is held whole."""
DIFF_LIMIT = 16 * 1024 * 1024
"""The most of git's list of changed paths the host reads for one judgment (some 150,000 paths);
a tree of a few hundred bytes can name millions (one folder shared by every level)."""
TOO_MANY = "more new commits or changed paths than the host judges (the VM's history is held whole)"


def changes_between(root: Path, base: str, tip: str) -> list[TreeChange]:
    """Every path that differs between the trees of `base` (a commit or tree) and `tip`; `TooMuch`
    past `DIFF_LIMIT`."""
    return parse_diff_tree(host_git.bounded(root, "diff-tree", "-r", "-z", "--no-renames", base, tip, "--",
                                            limit=DIFF_LIMIT))


class Deferred(Exception):
    """The sync's budget for judging ran out before this branch: the next sync judges it."""


class JudgingBudget:
    """What one sync reads of git's lists of changed paths, all branches together: the VM picks how
    many branches and paths it offers, and the guard's round waits while the sync runs. A branch is
    judged only while some of `SYNC_BUDGET` is left (so a sync reads at most it and one judgment
    more); the rest wait for the next sync."""

    def __init__(self, left: int) -> None:
        self.left = left

    def start(self) -> None:
        if self.left <= 0:
            raise Deferred

    def read(self, root: Path, *args: str, stdin: bytes | None = None) -> bytes:
        """`git ARGS` up to `DIFF_LIMIT` (`TooMuch` past it), counted against the budget."""
        out = host_git.bounded(root, *args, stdin=stdin, limit=DIFF_LIMIT)
        self.left -= len(out)
        return out


SYNC_BUDGET = 2 * DIFF_LIMIT


def reasons_to_hold(root: Path, tip: str, branch: str, guarded: Sequence[str], budget: JudgingBudget) -> list[str]:
    """Why the host must not take `tip` as it is; empty when it may. `Deferred` when the budget ran
    out first. Two looks, each from object data alone:
    - every commit the host does not have yet, against its parents: a change a later commit undoes
      still counts;
    - the tip's tree against the host's branch of the same name (else HEAD), unless the host has the
      tip already: what switching to it, or a fast-forward, would put in the work tree, though it
      came from an older commit of the host's own."""
    budget.start()
    try:
        listed = host_git.bounded(root, "rev-list", tip, "--not", "--branches", "--tags",
                                  f"--glob={SANDBOX_PREFIX}*", limit=(COMMIT_LIMIT + 1) * 65)
        commits = listed.split()
        if len(commits) > COMMIT_LIMIT:
            return [TOO_MANY]
        changes: list[TreeChange] = []
        if commits:
            changes += parse_diff_tree(budget.read(root, "diff-tree", "--stdin", "-r", "-z", "--no-renames", "-c",
                                                   "--root", stdin=b"".join(commit + b"\n" for commit in commits)))
        host = host_side(root, branch)
        if host and not host_git.succeeds(root, "merge-base", "--is-ancestor", tip, host):
            changes += parse_diff_tree(budget.read(root, "diff-tree", "-r", "-z", "--no-renames", host, tip, "--"))
    except TooMuch:
        return [TOO_MANY]
    return held_reasons(changes, guarded)


def host_side(root: Path, branch: str) -> str:
    """The commit of the host's branch named `branch`, else of its HEAD; "" when neither is one."""
    for side in (f"refs/heads/{branch}", "HEAD"):
        found = host_git.text(root, "rev-parse", "-q", "--verify", f"{side}^{{commit}}")
        if found:
            return found
    return ""


def judged_base(root: Path, tip: str, branch: str, object_format: str) -> str:
    """Where a look at a VM branch starts: its merge base with the host's branch of the same name,
    else with the host's HEAD, else the empty tree (a history the host shares nothing of)."""
    for side in (f"refs/heads/{branch}", "HEAD"):
        if host_git.succeeds(root, "rev-parse", "-q", "--verify", f"{side}^{{commit}}"):
            base = host_git.text(root, "merge-base", tip, side)
            if base:
                return base
    return EMPTY_TREE[object_format]
