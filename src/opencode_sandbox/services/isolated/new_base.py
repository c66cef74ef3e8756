"""The base after an apply: a commit the host makes of the VM's tree with every change left out
kept as the old base had it, so the next `diff` shows those again and a later `apply` takes them.

The tree is built with `git ls-tree` and `git mktree`, folder by folder along the kept paths: no
index is read or written, and a tree whose names git would refuse to put in an index (the VM's to
make) is carried over as it is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from opencode_sandbox.core.vm_commits import ABSENT, GITLINK
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.trees import DIFF_LIMIT
from opencode_sandbox.services.git_sync.work_tree import SNAPSHOT_AUTHOR
from opencode_sandbox.services.isolated import flags as rules
from opencode_sandbox.services.isolated.changes import Change
from opencode_sandbox.services.isolated.refs import FROM_NOTHING, Located

FOLDER_MODE = "040000"

Entry = tuple[str, str, str]
"""Mode, type and id of a tree entry."""


def move_base(root: Path, where: Located, kept: Sequence[Change]) -> str:
    """The new base commit, `where.base_ref` moved to it from the value it had when read (an update
    between read and now fails it); the old one when nothing would change."""
    # A path with an empty part names no tree entry (git's trees have none): nothing to keep of it.
    # One too deep is never applied, and not kept either: each of its folders would cost a step here.
    overrides = {change.path.encode("utf-8", errors="surrogateescape"): _entry(change) for change in kept
                 if "" not in change.path.split("/") and rules.TOO_DEEP not in change.flags}
    wip_tree = host_git.text(root, "rev-parse", f"{where.wip}^{{tree}}")
    tree = _rebuilt(root, wip_tree, overrides) if overrides else wip_tree
    if where.base_from != FROM_NOTHING and tree == host_git.text(root, "rev-parse", f"{where.base}^{{tree}}") \
            and where.base_ref_value:
        return where.base
    parents = ("-p", where.base) if where.base_from != FROM_NOTHING else ()
    message = f"opencode-sandbox: what the host's work tree holds of the VM's work on {where.branch}"
    made = host_git.run(root, *SNAPSHOT_AUTHOR, "commit-tree", tree or _empty_tree(root), *parents, "-m", message)
    commit = made.stdout.decode().strip()
    old = where.base_ref_value or "0" * len(commit)
    host_git.run(root, "update-ref", "-m", "opencode-sandbox: apply", where.base_ref, commit, old)
    return commit


def _entry(change: Change) -> Entry | None:
    if change.old_mode == ABSENT:
        return None
    kind = "commit" if change.old_mode == GITLINK else "tree" if change.old_mode == FOLDER_MODE else "blob"
    return (change.old_mode, kind, change.old_id)


def _rebuilt(root: Path, tree: str | None, overrides: Mapping[bytes, Entry | None]) -> str | None:
    """`tree` with each path of `overrides` given its entry (None: removed); None when nothing is left."""
    entries = _listed(root, tree) if tree else {}
    below: dict[bytes, dict[bytes, Entry | None]] = {}
    for path, entry in overrides.items():
        first, slash, rest = path.partition(b"/")
        if slash:
            below.setdefault(first, {})[rest] = entry
        elif entry is None:
            entries.pop(first, None)
        else:
            entries[first] = entry
    for name, inner in below.items():
        current = entries.get(name)
        made = _rebuilt(root, current[2] if current and current[1] == "tree" else None, inner)
        if made is not None:
            entries[name] = (FOLDER_MODE, "tree", made)
        elif current is not None and current[1] == "tree":
            del entries[name]
    if not entries:
        return None
    listing = b"".join(f"{mode} {kind} {object_id}\t".encode() + name + b"\0"
                       for name, (mode, kind, object_id) in entries.items())
    return host_git.run(root, "mktree", "-z", stdin=listing).stdout.decode().strip()


def _listed(root: Path, tree: str) -> dict[bytes, Entry]:
    out = host_git.bounded(root, "ls-tree", "-z", tree, limit=DIFF_LIMIT)
    entries: dict[bytes, Entry] = {}
    for record in out.split(b"\0"):
        head, tab, name = record.partition(b"\t")
        words = head.decode("ascii", errors="replace").split()
        if tab and len(words) == 3:
            entries[name] = (words[0], words[1], words[2])
    return entries


def _empty_tree(root: Path) -> str:
    return host_git.run(root, "mktree", "-z", stdin=b"").stdout.decode().strip()
