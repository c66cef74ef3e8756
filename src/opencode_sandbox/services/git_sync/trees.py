"""What a range of commits changes, read from the host's object store alone."""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox.core.vm_commits import EMPTY_TREE, TreeChange, parse_diff_tree
from opencode_sandbox.services.git_sync import host_git


def changes_between(root: Path, base: str, tip: str) -> list[TreeChange]:
    """Every path that differs between the trees of `base` (a commit or tree) and `tip`."""
    listed = host_git.run(root, "diff-tree", "-r", "-z", "--no-renames", "--no-ext-diff", base, tip, "--")
    return parse_diff_tree(listed.stdout)


def judged_base(root: Path, tip: str, branch: str, object_format: str) -> str:
    """What a VM branch's tip is judged against: its merge base with the host's branch of the same
    name, else with the host's HEAD, else the empty tree (a history the host shares nothing of)."""
    for side in (f"refs/heads/{branch}", "HEAD"):
        if host_git.succeeds(root, "rev-parse", "-q", "--verify", f"{side}^{{commit}}"):
            base = host_git.text(root, "merge-base", tip, side)
            if base:
                return base
    return EMPTY_TREE[object_format]
