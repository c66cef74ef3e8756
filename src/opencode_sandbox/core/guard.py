"""The guard on files the host runs: which paths, what changed, which changes the VM made.

A snapshot maps each guarded file or symlink, by its path relative to the checkout, to an
`Entry`; comparing two snapshots gives the changes. Everything here works on plain values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opencode_sandbox.core.guard_catalogue import CATALOGUE
from opencode_sandbox.core.records import Record

DEFAULT_GUARDED = tuple(guarded.path for guarded in CATALOGUE)
"""Paths the host executes or applies on the user's behalf, relative to the checkout
(`guard_catalogue` says which tool and how): shell and editor set-ups, what the usual git hook
managers and package managers run from the work tree, and the project settings and instructions
of the coding agents a user may also run on the host (their hooks, plugins and MCP servers are
programs). The host's `.git` is not among them: the VM never reaches it (docs/git.md). Each is
guarded in every folder below the checkout's top as well (`GUARDED_BELOW`)."""

def _by_first_name(paths: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = {}
    for path in paths:
        grouped.setdefault(path.partition("/")[0], []).append(path)
    return {first: tuple(group) for first, group in grouped.items()}


GUARDED_BELOW: Mapping[str, tuple[str, ...]] = _by_first_name(DEFAULT_GUARDED)
"""The default guarded paths by their first name, for the folders below the top: the tools that
read them look in the folder they run in (and its parents), so a `packages/web/opencode.json` or
`packages/web/.claude/settings.json` runs on the host as surely as the top's when the user starts
the agent in `packages/web`."""
OLD_REVIEW_FOLDER = ".opencode-sandbox/guard"
"""Where versions before 2026-12 kept what the guard took from the VM, inside the checkout, where
the VM could read it and link to it. What is kept for review now lies in the project's private
state folder (`state_layout.GUARD_REVIEW`); this folder, if an older version left it, is the
user's to delete, and an ordinary part of the guarded `.opencode-sandbox/`. A link the VM makes
into it still counts as leading into what was set aside."""
COPY_LIMIT = 1024 * 1024
"""A guarded file larger than this is recorded by its identity alone (inode, size, times), never read: no
copy is kept to revert to."""
CONTENTS_BUDGET = 32 * 1024 * 1024
"""The contents one snapshot keeps in memory, all files together; past it a file is digested as it
is read and kept by its digest alone, so a change to it is seen but cannot be put back."""
READ_BUDGET = 256 * 1024 * 1024
"""The bytes one snapshot reads, all files together. The VM picks how many files there are: past
this the guard cannot look at them within its time, and says so (`OverBudget`)."""
ENTRY_BUDGET = 50_000
"""The entries one snapshot records, all guarded paths together, for the same reason."""
FOLDER_ENTRY_LIMIT = 2_000
FOLDER_READ_LIMIT = 64 * 1024 * 1024
"""A guarded folder holding more entries than this, or more bytes to read, is recorded whole
(`CROWDED`), not file by file: what it holds is not read, and a folder that becomes so while the VM
runs is moved aside whole. The smallest such folder is: a plugin folder beside a crowded
`node_modules` stays recorded file by file."""
FOLDER_SEEN_LIMIT = 10 * FOLDER_ENTRY_LIMIT
"""The names one guarded folder's walk may list, in all its subfolders, crowded ones included: past
it the guarded folder is recorded whole, so nesting crowded folders costs a walk no more."""
SPARSE_FROM = 64 * 1024
"""A file of this size or more with fewer than half its bytes on disk (sparse) is recorded by its
identity, never read: reading it costs the guard time and the VM no disk."""
DIFF_LINE_LIMIT = 200

FILE = "file"
LINK = "link"
CROWDED = "crowded"
"""A guarded folder of more than `FOLDER_ENTRY_LIMIT` entries, recorded as one."""


class Entry(Record):
    kind: str
    """FILE, LINK or CROWDED."""
    mode: int = 0
    size: int = 0
    digest: str = ""
    """The SHA-256 of a file's content, or of a link's target text."""
    target: str = ""
    """A link's target, as written; links are recorded, never followed."""

    def describe(self) -> str:
        if self.kind == LINK:
            return f"symlink to {shown(self.target)}"
        if self.kind == CROWDED:
            return f"a folder of more than {FOLDER_ENTRY_LIMIT} entries or {FOLDER_READ_LIMIT // 2**20} MiB, not read"
        return f"mode {self.mode:04o}, {self.size} bytes"

    def as_mapping(self) -> dict[str, object]:
        return dict(self._asdict())


def guarded_root(path: str, top: Sequence[str]) -> str | None:
    """The guarded path `path` is or lies in, as the snapshot takes it: one of `top` from the
    checkout's top, or a default guarded name in a folder below it (`GUARDED_BELOW`); None when it
    lies in none."""
    parts = path.split("/")
    for start, first in enumerate(parts):
        rest = "/".join(parts[start:])
        for each in top if start == 0 else GUARDED_BELOW.get(first, ()):
            if rest == each or rest.startswith(each + "/"):
                return "/".join([*parts[:start], each])
    return None


def entry_from_mapping(data: Mapping[str, object]) -> Entry:
    kind, mode, size = data.get("kind"), data.get("mode"), data.get("size")
    digest, target = data.get("digest"), data.get("target", "")
    if kind not in (FILE, LINK, CROWDED) or not isinstance(mode, int) or not isinstance(size, int):
        raise ValueError(f"not a guarded entry: {data!r}")
    if not isinstance(digest, str) or not isinstance(target, str):
        raise ValueError(f"not a guarded entry: {data!r}")
    return Entry(kind, mode, size, digest, target)


class Change(Record):
    path: str
    before: Entry | None
    after: Entry | None

    @property
    def what(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        if self.before._replace(mode=0) == self.after._replace(mode=0):
            return "mode changed"
        return "changed"

    def headline(self) -> str:
        path = shown(self.path)
        if self.before is None and self.after is not None:
            return f"{path}: added ({self.after.describe()})"
        if self.after is None and self.before is not None:
            return f"{path}: removed (was {self.before.describe()})"
        assert self.before is not None and self.after is not None
        return f"{path}: {self.what} ({self.before.describe()} -> {self.after.describe()})"

    def as_mapping(self) -> dict[str, object]:
        return {
            "path": self.path,
            "change": self.what,
            "before": self.before.as_mapping() if self.before else None,
            "after": self.after.as_mapping() if self.after else None,
        }


def changes(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> list[Change]:
    """What differs between two snapshots, by path; only the end states count."""
    paths = sorted(set(before) | set(after))
    return [Change(path, before.get(path), after.get(path)) for path in paths if before.get(path) != after.get(path)]


def vm_changes(baseline: Mapping[str, Entry], at_stop: Mapping[str, Entry] | None,
               current: Mapping[str, Entry]) -> tuple[list[Change], list[Change]]:
    """The changes the VM made, and those made on the host after it stopped.

    `at_stop` is the snapshot taken as the VM stopped, when the tool stopped it; without one,
    every change since the baseline is counted as the VM's. A path the host changed again after
    the stop is the user's: it is reported, never reverted.
    """
    if at_stop is None:
        return changes(baseline, current), []
    by_vm: list[Change] = []
    later: list[Change] = []
    for change in changes(baseline, at_stop):
        if current.get(change.path) == at_stop.get(change.path):
            by_vm.append(change)
        else:
            later.append(Change(change.path, change.before, current.get(change.path)))
    return by_vm, later


def is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def diff_lines(change: Change, before: bytes | None, after: bytes | None) -> list[str]:
    """A unified diff of a text file's change; a line on size and digest for anything else.

    `before`/`after`: the contents, None where absent or not kept.
    """
    import difflib

    if CROWDED in (change.before and change.before.kind, change.after and change.after.kind):
        return []
    for entry, data in ((change.before, before), (change.after, after)):
        if entry is not None and entry.kind == FILE and (data is None or not is_text(data)):
            return [f"  binary or not kept: {_digest_line(change)}"]
    if (change.before and change.before.kind == LINK) or (change.after and change.after.kind == LINK):
        return []
    old = _lines((before or b"").decode("utf-8"))
    new = _lines((after or b"").decode("utf-8"))
    path = shown(change.path)
    lines = [shown(line.rstrip("\n")) for line in difflib.unified_diff(
        old, new, f"a/{path}" if change.before else "/dev/null",
        f"b/{path}" if change.after else "/dev/null")]
    if len(lines) > DIFF_LINE_LIMIT:
        lines = [*lines[:DIFF_LINE_LIMIT], f"... {len(lines) - DIFF_LINE_LIMIT} more lines"]
    return lines


def _lines(text: str) -> list[str]:
    """Lines as git counts them, split at newlines only: a carriage return or a form feed stays
    inside its line, where `shown` makes it visible."""
    lines = text.split("\n")
    ended = [line + "\n" for line in lines[:-1]]
    return [*ended, lines[-1]] if lines[-1] else ended


_INVISIBLE = {**{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
              ord("\t"): "\t",
              **{code: f"\\x{code - 0xDC00:02x}" for code in range(0xDC80, 0xDD00)},
              **{code: f"\\u{code:04x}" for code in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029,
                                                      *range(0x202A, 0x202F), *range(0x2066, 0x206A))}}
"""Control characters, which a terminal obeys (`\\x1b[2K` erases the line shown before it), the
bytes of a file name that are not UTF-8 (which Python keeps as lone surrogates and would write
back raw: `\\x9b` starts a control sequence too), and the marks that reorder or break what is
shown, each written as its escape; a tab stays."""


def shown(text: str) -> str:
    """VM-written text made safe to print on the user's terminal: nothing in it can move the
    cursor, erase, recolour or reorder what is shown around it."""
    return text.translate(_INVISIBLE)


_INVISIBLE_BUT_LINES = {code: escape for code, escape in _INVISIBLE.items() if code != ord("\n")}


def terminal_text(text: str) -> str:
    """A message of the tool's, whatever VM text it quotes, made safe for the terminal as `shown`
    does, its line breaks kept."""
    return text.translate(_INVISIBLE_BUT_LINES)


def _digest_line(change: Change) -> str:
    def side(entry: Entry | None) -> str:
        return "absent" if entry is None else f"{entry.size} bytes, sha256 {entry.digest[:16]}"

    return f"{side(change.before)} -> {side(change.after)}"


def check_guarded_path(value: str) -> str:
    """A guarded path as configured: relative to the checkout, inside it; normalised."""
    import posixpath

    if not value or value.startswith(("/", "~")):
        raise ValueError(f"'{value}' must be a path relative to the checkout, such as .husky or Makefile")
    normal = posixpath.normpath(value)
    if normal == "." or normal == ".." or normal.startswith("../"):
        raise ValueError(f"'{value}' is not inside the checkout")
    return normal
