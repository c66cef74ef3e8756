"""What a change of the VM's is, and what about it needs the user's word or keeps it out: rules on
the change's paths, modes and link target alone."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

from opencode_sandbox.core.vm_commits import ABSENT, EXECUTABLE, GITLINK, TOOL_FOLDER, runs_on_host

ADDED = "added"
MODIFIED = "modified"
DELETED = "deleted"
TYPE_CHANGED = "type-changed"

GITLINK_FLAG = "gitlink"
HOST_RUN = "host-run"
NESTED_GIT = "nested-git"
LINK_LEAVES = "link-leaves-tree"
MODE_CHANGE = "mode-change"
BAD_PATH = "bad-path"
"""A path with an empty, `.` or `..` component: no place in the checkout."""
NOT_A_BLOB = "not-a-blob"
"""The entry names an object the host's store does not hold as a file's content."""
LINK_IN_THE_WAY = "link-in-the-way"
"""A folder on the way to the path is a link on the host: never followed."""

TOO_DEEP = "too-deep"
"""More folders deep than `DEPTH_LIMIT`: no checkout needs it, and each level costs the host a step."""
REPOSITORY_SHAPE = "repository-shape"
"""A `HEAD` file, or a path in a folder that holds one: with `objects` and `refs` beside it, git on the
host takes that folder for a repository (a bare one) and reads its `config`."""

NEVER_APPLIED = (GITLINK_FLAG, NESTED_GIT, LINK_LEAVES, BAD_PATH, NOT_A_BLOB, LINK_IN_THE_WAY, TOO_DEEP,
                 REPOSITORY_SHAPE)
DEPTH_LIMIT = 100
NAME_LIMIT = 255
"""The longest name a Linux file system holds, in bytes."""
ASKED = (HOST_RUN, MODE_CHANGE)
"""Applied only when the user says so, one by one, on a terminal."""
LINK_TARGET_LIMIT = 4096
"""The longest link target the host writes (a path's limit on Linux)."""


def status(old_mode: str, new_mode: str) -> str:
    if old_mode == ABSENT:
        return ADDED
    if new_mode == ABSENT:
        return DELETED
    return MODIFIED if _kind(old_mode) == _kind(new_mode) else TYPE_CHANGED


def _kind(mode: str) -> str:
    return "file" if mode.startswith("100") else mode


def path_flags(path: str, old_mode: str, new_mode: str, guarded: Sequence[str]) -> list[str]:
    """The flags a change has by its path and modes alone."""
    parts = path.split("/")
    folded = path.casefold()
    flags = []
    if GITLINK in (old_mode, new_mode):
        flags.append(GITLINK_FLAG)
    if (runs_on_host(path, guarded) or parts[-1].casefold() == ".gitmodules"
            or folded == TOOL_FOLDER or folded.startswith(TOOL_FOLDER + "/")):
        flags.append(HOST_RUN)
    if any(is_dot_git(part) for part in parts):
        flags.append(NESTED_GIT)
    if any(part in ("", ".", "..") or len(part.encode("utf-8", errors="surrogateescape")) > NAME_LIMIT
           for part in parts):
        flags.append(BAD_PATH)
    if len(parts) > DEPTH_LIMIT:
        flags.append(TOO_DEEP)
    if (old_mode != new_mode and ABSENT not in (old_mode, new_mode)) or (old_mode == ABSENT and new_mode == EXECUTABLE):
        flags.append(MODE_CHANGE)
    return flags


def is_dot_git(name: str) -> bool:
    """`.git` in any case; with the trailing dots and spaces Windows file systems drop."""
    return name.casefold().rstrip(". ") == ".git"


def link_leaves(path: str, target: bytes) -> bool:
    """A link at `path` to `target` may reach outside the checkout, or into a `.git`: its target
    is absolute, empty or no path, climbs above the top once resolved from the link's folder
    (lexically), or climbs (`..`) after a name, where that name may itself be a link whose parent
    is elsewhere."""
    if not target or len(target) > LINK_TARGET_LIMIT or b"\0" in target or target.startswith(b"/"):
        return True
    parts = target.decode("utf-8", errors="surrogateescape").split("/")
    named = False
    for part in parts:
        if part == "..":
            if named:
                return True
        elif part not in ("", "."):
            named = True
        if is_dot_git(part):
            return True
    folder = posixpath.dirname(path)
    resolved = posixpath.normpath(posixpath.join(folder, *parts))
    return resolved == ".." or resolved.startswith("../")


MEANING = {
    GITLINK_FLAG: "a submodule commit (gitlink)",
    HOST_RUN: "a file the host runs (a hook, shell or editor setting, .gitmodules, .opencode-sandbox/)",
    NESTED_GIT: "under a .git, or in a repository nested in the checkout",
    LINK_LEAVES: "a symlink that may reach outside the checkout or into a .git",
    MODE_CHANGE: "its mode changes, or a new executable",
    BAD_PATH: f"a path with an empty, . or .. part, or a name over {NAME_LIMIT} bytes",
    NOT_A_BLOB: "its object is not a file's content in the host's store",
    LINK_IN_THE_WAY: "a folder on its way is a symlink on the host, never followed",
    TOO_DEEP: f"more than {DEPTH_LIMIT} folders deep",
    REPOSITORY_SHAPE: "a HEAD file, or in a folder with one: git would take the folder for a repository",
}


def repository_folders(paths: Sequence[str], host_has_head: Callable[[str], bool]) -> set[str]:
    """The folders below the top that hold a `HEAD` (in any case) in the VM's work or on the host:
    with `objects` and `refs` beside it, git takes such a folder for a bare repository, whose
    `config` it reads (and whose `core.fsmonitor` it runs) in any folder below it. The top is left
    out: its `.git` comes first."""
    folders = {path.rpartition("/")[0] for path in paths if path.rpartition("/")[2].casefold() == "head"}
    candidates = {"/".join(path.split("/")[:depth]) for path in paths for depth in range(1, path.count("/") + 1)}
    folders |= {folder for folder in candidates - folders if host_has_head(folder)}
    return {folder for folder in folders if folder}


def in_repository_shape(path: str, folders: set[str]) -> bool:
    parts = path.split("/")
    return any("/".join(parts[:depth]) in folders for depth in range(1, len(parts)))


def legend(flag: str) -> str:
    return f"[{flag}] {MEANING[flag]}: " + ("never applied" if flag in NEVER_APPLIED else "asked about")
