"""Which branch's work is looked at, and the two commits it is read between."""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_commits import EMPTY_TREE
from opencode_sandbox.core.vm_git import is_object_id, valid_ref
from opencode_sandbox.core.workspace import BASE_PREFIX, DETACHED, WIP_PREFIX
from opencode_sandbox.errors import UsageError
from opencode_sandbox.services.git_sync import host_git

FROM_REF = "ref"
FROM_MERGE_BASE = "merge-base"
FROM_NOTHING = "empty"


class Located(Record):
    branch: str
    wip: str
    """The VM's commit."""
    base: str
    """What the VM's work is read against: a commit, or the empty tree."""
    base_from: str
    """FROM_REF (`refs/sandbox/base/<branch>`), FROM_MERGE_BASE (the wip's merge base with the
    host's HEAD) or FROM_NOTHING (the empty tree)."""
    object_format: str

    @property
    def base_ref(self) -> str:
        return BASE_PREFIX + self.branch

    @property
    def base_ref_value(self) -> str:
        """The base ref's commit, "" when there is none."""
        return self.base if self.base_from == FROM_REF else ""


def chosen_branch(root: Path, branch: str | None) -> str:
    """`branch` when given, else the host's checked-out branch, else `HEAD` (detached)."""
    if branch is None:
        branch = host_git.text(root, "symbolic-ref", "-q", "--short", "HEAD") or DETACHED
    if branch != DETACHED and not valid_ref("refs/heads/" + branch):
        raise UsageError(f"'{branch}' is not a branch name the VM's work is kept under",
                         hint="name a branch such as main or feature/x, or HEAD for a detached HEAD")
    return branch


def locate(root: Path, branch: str, object_format: str, exactly: str | None = None) -> Located | None:
    """The VM's commit for `branch` (`exactly` this one, when given: the one the user looked at)
    and what it is read against; None when the VM's work has not reached the host."""
    if exactly is not None:
        wip = _commit(root, exactly, object_format) if is_object_id(exactly, object_format) else ""
        if not wip:
            raise UsageError(f"'{exactly}' is not a commit of the VM's work this checkout holds",
                             hint="give the whole id `opencode-sandbox diff` prints after 'the VM's commit'")
    else:
        wip = _commit(root, WIP_PREFIX + branch, object_format)
    if not wip:
        return None
    base = _commit(root, BASE_PREFIX + branch, object_format)
    if base:
        return Located(branch, wip, base, FROM_REF, object_format)
    merge_base = host_git.text(root, "merge-base", wip, "HEAD")
    if is_object_id(merge_base, object_format):
        return Located(branch, wip, merge_base, FROM_MERGE_BASE, object_format)
    return Located(branch, wip, EMPTY_TREE[object_format], FROM_NOTHING, object_format)


def _commit(root: Path, ref: str, object_format: str) -> str:
    found = host_git.text(root, "rev-parse", "-q", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    return found if is_object_id(found, object_format) else ""
