"""Where the VM works: on the host's checkout (shared) or on a work tree of its own (isolated).

In the shared mode the checkout is mounted at `/workspace`, the VM writes it live, and the guard
watches the files the host runs. In the isolated mode nothing of the host's checkout is mounted:
`/workspace` is a volume of the VM's own, seeded from the host's checked-out commit and the user's
uncommitted changes, and the VM's work reaches the host only as git data (`refs/sandbox/heads/*`
and `refs/sandbox/wip/*`), which `diff` shows and `apply` brings into the checkout."""

from __future__ import annotations

SHARED = "shared"
ISOLATED = "isolated"
WORKSPACES = (SHARED, ISOLATED)

WIP_PREFIX = "refs/sandbox/wip/"
"""The VM's whole work tree (its commits and its uncommitted work), one commit per VM branch."""
BASE_PREFIX = "refs/sandbox/base/"
"""What the host's work tree holds of the VM's work, per branch: the seed, then each `apply`."""
DETACHED = "HEAD"
"""The branch name of a detached HEAD, in those refs."""
WORK_TARGET = "/workspace"
