"""What the host's work tree holds at a path, read from descriptors one folder at a time: no link
is followed, nothing inside a `.git` is read, a file is read only when its content is wanted."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Container

from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_commits import ABSENT, EXECUTABLE, REGULAR, SYMLINK
from opencode_sandbox.services.guard.paths import DIRECTORY, NOT_A_FOLDER
from opencode_sandbox.services.isolated.flags import is_dot_git
from opencode_sandbox.services.isolated.objects import blob_id, hasher

NOTHING = "absent"
FILE = "file"
LINK = "link"
FOLDER = "folder"
OTHER = "other"
"""A device, socket or pipe: never opened."""
NOT_READ = "not read"
"""A path inside a `.git` (git's own files are never read), or one with an empty, `.` or `..` part
(which could lead out of the checkout)."""
_CHUNK = 1024 * 1024


class HostEntry(Record):
    kind: str
    mode: str = ""
    """The mode git would give it: REGULAR or EXECUTABLE for a file, SYMLINK for a link."""
    object_id: str = ""
    """The id git would give its content (a link's: its target); "" when not read."""
    size: int = 0
    content: bytes | None = None
    """A file's content or a link's target, when small enough to show."""
    nested: str = ""
    """The folder below the top, on the way to the path, that holds a `.git`: a repository of its own."""
    in_the_way: str = ""
    """The first step of the path's folders that is not a folder on the host."""
    in_the_way_is_link: bool = False

    def state(self) -> tuple[str, str]:
        """Mode and id as a tree entry would hold them; what no tree entry can be is never equal to one."""
        if self.kind == NOTHING or (self.in_the_way and not self.in_the_way_is_link):
            return (ABSENT, "")
        if self.kind in (FILE, LINK) and self.object_id:
            return (self.mode, self.object_id)
        return (self.kind, "unmatched")


NAME_LIMIT = 255
"""The longest name a Linux file system holds, in bytes."""


def look(top: int, path: str, object_format: str, sizes_wanted: Container[int], keep: int) -> HostEntry:
    """The host's entry at `path`; a file's content is hashed only when its size is in `sizes_wanted`
    or at most `keep` (then it is also kept)."""
    *folders, name = path.split("/")
    if any(is_dot_git(part) or part in ("", ".", "..") or len(os.fsencode(part)) > NAME_LIMIT
           for part in (*folders, name)):
        return HostEntry(NOT_READ)
    current, nested = top, ""
    try:
        for depth, part in enumerate(folders):
            try:
                inner = os.open(part, DIRECTORY, dir_fd=current)
            except OSError as error:
                if error.errno == errno.ENOENT:
                    return HostEntry(NOTHING, nested=nested)
                if error.errno not in NOT_A_FOLDER:
                    raise
                where = "/".join(folders[:depth + 1])
                is_link = stat.S_ISLNK(os.stat(part, dir_fd=current, follow_symlinks=False).st_mode)
                return HostEntry(NOTHING, nested=nested, in_the_way=where, in_the_way_is_link=is_link)
            if current != top:
                os.close(current)
            current = inner
            if not nested and _holds_git(current):
                nested = "/".join(folders[:depth + 1])
        return _entry(current, name, object_format, sizes_wanted, keep)._replace(nested=nested)
    except PermissionError:
        return HostEntry(OTHER, nested=nested)
    finally:
        if current != top:
            os.close(current)


def _holds_git(folder: int) -> bool:
    """The folder holds a `.git` (in any case, where its file system ignores case)."""
    try:
        os.stat(".git", dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _entry(folder: int, name: str, object_format: str, sizes_wanted: Container[int], keep: int) -> HostEntry:
    try:
        found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return HostEntry(NOTHING)
    if stat.S_ISLNK(found.st_mode):
        target = os.readlink(os.fsencode(name), dir_fd=folder)
        return HostEntry(LINK, SYMLINK, blob_id(target, object_format), len(target), target)
    if stat.S_ISDIR(found.st_mode):
        return HostEntry(FOLDER)
    if not stat.S_ISREG(found.st_mode):
        return HostEntry(OTHER)
    mode = EXECUTABLE if found.st_mode & stat.S_IXUSR else REGULAR
    if found.st_size > keep and found.st_size not in sizes_wanted:
        return HostEntry(FILE, mode, size=found.st_size)
    object_id, content = _read(folder, name, found.st_size, object_format, keep)
    return HostEntry(FILE, mode, object_id, found.st_size, content)


def _read(folder: int, name: str, size: int, object_format: str, keep: int) -> tuple[str, bytes | None]:
    """The file's id, and its content when at most `keep` bytes; no id when it is no longer the
    regular file of `size` bytes that was looked at."""
    descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return "", None
        digest = hasher(object_format)
        digest.update(b"blob %d\0" % size)
        kept: list[bytes] = []
        left = size
        while left and (chunk := handle.read(min(_CHUNK, left))):
            digest.update(chunk)
            if size <= keep:
                kept.append(chunk)
            left -= len(chunk)
        if left or handle.read(1):
            return "", None
    return digest.hexdigest(), b"".join(kept) if size <= keep else None
