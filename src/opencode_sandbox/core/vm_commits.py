"""Which of the VM's commits the host takes as they are, and which it holds for the user to look at.

A VM branch is judged by what its commits change against the history the host already has
(`git diff-tree` between the merge base and its tip): object data alone, never the work tree.
It is held when that change could make the host run something the moment git or a tool on the
host reads the tree: a gitlink (git enters the folder and reads that repository's configuration,
its `core.fsmonitor` included), a `.gitmodules` (submodule URLs and commands), anything under
`.opencode-sandbox/` (the tool's own configuration), or a file the host runs (the guard's paths).
A held branch reaches neither `refs/sandbox/heads/` nor the host's checked-out branch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from opencode_sandbox.core.guard import GUARDED_BELOW, shown
from opencode_sandbox.core.records import Record

GITLINK = "160000"
SYMLINK = "120000"
ABSENT = "000000"
EXECUTABLE = "100755"
REGULAR = "100644"
EMPTY_TREE = {"sha1": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
              "sha256": "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"}
TOOL_FOLDER = ".opencode-sandbox"
LOOK = "git diff --stat --submodule=short --no-textconv --no-ext-diff"
"""A look at a held branch that runs nothing: no textconv or external diff on the VM's files, and a
submodule named by its commit, never entered."""
SHOWN_REASONS = 5
REASON_LIMIT = 20
"""The most reasons kept for one held branch: the VM picks how many paths its commits change."""
"""A held branch's message names this many of its reasons, and counts the rest."""


class TreeChange(Record):
    """One path `git diff-tree -r` reports between two commits."""

    path: str
    old_mode: str
    new_mode: str
    new_id: str
    """The object at `path` in the newer commit (zeros where the path is gone)."""
    old_id: str = ""
    """The object at `path` in the older commit (zeros where there was none; for a merge, the
    first parent's)."""


def parse_diff_tree(raw: bytes) -> list[TreeChange]:
    """The changes of `git diff-tree -r -z --no-renames`, for two trees or, with `--stdin -c --root`,
    for commits: a raw line (`:<mode> <mode> <id> <id> <status>`, or for a merge's combined diff one
    colon, mode and id per parent before the result's) then the path, each ended by NUL; a commit's
    id on a field of its own is passed over. A path is any bytes; undecodable ones keep their bytes
    as surrogates, so they are shown escaped and never matched by accident."""
    fields = raw.split(b"\0")
    found: list[TreeChange] = []
    index = 0
    while index < len(fields) - 1:
        head = fields[index]
        if not head.startswith(b":"):
            if len(head) not in (40, 64) or head.strip(b"0123456789abcdef"):
                raise ValueError(f"not a line of git diff-tree: {head[:80]!r}")
            index += 1  # a commit's id, before its changes
            continue
        parents = len(head) - len(head.lstrip(b":"))
        words = head.decode("ascii", errors="replace").lstrip(":").split()
        if len(words) != 2 * parents + 3:
            raise ValueError(f"not a line of git diff-tree: {head[:80]!r}")
        old_modes, new_mode, new_id = words[:parents], words[parents], words[2 * parents + 1]
        old_mode = next((mode for mode in old_modes if mode == GITLINK), old_modes[0])
        found.append(TreeChange(fields[index + 1].decode("utf-8", errors="surrogateescape"), old_mode, new_mode,
                                new_id, words[parents + 1]))
        index += 2
    return found


_BELOW_FOLDED = {name.casefold(): tuple(each.casefold() for each in paths) for name, paths in GUARDED_BELOW.items()}


def runs_on_host(path: str, guarded: Sequence[str]) -> bool:
    """`path` is, or lies in, a guarded path: one of `guarded` from the checkout's top, or a default
    guarded name in any folder below it (the tools that read them look in the folder they run in).
    Names are compared without case: on a checkout whose file system ignores it (macOS, a casefolded
    folder), `.Envrc` is the `.envrc` direnv runs."""
    parts = path.casefold().split("/")
    top = [each.casefold().rstrip("/") for each in guarded]
    for start, first in enumerate(parts):
        candidates = top if start == 0 else _BELOW_FOLDED.get(first, ())
        rest = "/".join(parts[start:])
        # A folder of a guarded path counts too: made a link, it puts the guarded file elsewhere.
        if any(rest == each or rest.startswith(each + "/") or each.startswith(rest + "/") for each in candidates):
            return True
    return False


def held_reasons(changes: Iterable[TreeChange], guarded: Sequence[str]) -> list[str]:
    """Why the host must not take these changes as they are; empty when it may. At most
    `REASON_LIMIT` are named."""
    reasons: list[str] = []
    for change in changes:
        folded = change.path.casefold()
        name = folded.rsplit("/", 1)[-1]
        if GITLINK in (change.old_mode, change.new_mode):
            reasons.append(f"a gitlink (submodule) at {shown(change.path)}")
        elif name == ".gitmodules":
            reasons.append(f"{shown(change.path)} (submodule settings)")
        elif name == "head" and "/" in change.path:
            reasons.append(f"{shown(change.path)} (a HEAD file: git may take its folder for a repository)")
        elif folded == TOOL_FOLDER or folded.startswith(TOOL_FOLDER + "/"):
            reasons.append(f"{shown(change.path)} (this tool's configuration)")
        elif runs_on_host(change.path, guarded):
            reasons.append(f"{shown(change.path)} (a file the host runs)")
        if len(reasons) >= REASON_LIMIT:
            break
    return list(dict.fromkeys(reasons))


def summary(reasons: Sequence[str]) -> str:
    """The reasons in one line, the first few named."""
    named = ", ".join(reasons[:SHOWN_REASONS])
    more = len(reasons) - SHOWN_REASONS
    return named + (f" and {more} more" if more > 0 else "")


class HeldBranch(Record):
    """A VM branch tip the host keeps out of its refs until the user takes it."""

    commit: str
    base: str
    """The commit its changes were judged against (the merge base with the host), or the empty tree."""
    reasons: tuple[str, ...]


def held_from_mapping(data: Mapping[str, object]) -> HeldBranch:
    commit, base, reasons = data.get("commit"), data.get("base"), data.get("reasons")
    if not isinstance(commit, str) or not isinstance(base, str) or not isinstance(reasons, list):
        raise ValueError(f"not a held branch: {data!r}")
    return HeldBranch(commit, base, tuple(str(reason) for reason in reasons))


def held_line(branch: str, held: HeldBranch) -> str:
    """What `guard status`, a start and a detach say of a held branch."""
    commit, base = held.commit[:12], held.base[:12]
    return (f"{shown(branch)}: held, the VM's commit {commit} changes {summary(held.reasons)}; it is not in "
            f"refs/sandbox/heads/. Look at it with `{LOOK} {base} {commit}` (reads only git's objects), and take "
            f"it only once you have: `git merge {commit}` (docs/git.md#commits-the-host-holds)")


def capped(vm_heads: Mapping[str, str], first: Sequence[str], limit: int) -> tuple[dict[str, str], int]:
    """At most `limit` of the VM's branches, those named in `first` (the checked-out ones) before the
    rest in name order; and how many were left out."""
    order = [name for name in first if name in vm_heads]
    order += [name for name in sorted(vm_heads) if name not in order]
    kept = {name: vm_heads[name] for name in order[:limit]}
    return kept, len(vm_heads) - len(kept)
