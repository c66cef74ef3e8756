"""The files the host runs through a link of its checkout: `CLAUDE.md -> docs/agents.md` makes
`docs/agents.md` the agent's instructions, `.githooks/pre-commit -> ../scripts/check.sh` makes the
script a hook. The checkout's tracked links at a path the host runs lead to them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.core.vm_commits import SYMLINK, runs_on_host
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.trees import DIFF_LIMIT

LINKS_FOLLOWED = 1000


def link_targets(root: Path, guarded: Sequence[str]) -> tuple[str, ...]:
    """What the host's tracked links at a guarded path point to, inside the checkout."""
    try:
        listed = host_git.bounded(root, "ls-files", "-s", "-z", limit=DIFF_LIMIT)
    except host_git.GitSyncError:
        return ()
    found: list[str] = []
    for record in listed.split(b"\0"):
        head, tab, name = record.partition(b"\t")
        if not tab or not head.startswith(SYMLINK.encode()):
            continue
        path = name.decode("utf-8", errors="surrogateescape")
        if not runs_on_host(path, guarded):
            continue
        try:
            target = (root / path).resolve()
        except (OSError, RuntimeError):
            continue
        relative = os.path.relpath(target, root)
        if not relative.startswith("..") and relative.split(os.sep)[0] != ".git" and relative != ".":
            found.append(relative.replace(os.sep, "/"))
        if len(found) >= LINKS_FOLLOWED:
            break
    return tuple(found)
