"""The guarded files in the checkout: read them (a snapshot, bounded whatever the VM wrote) and put
a recorded version back.

Every path is walked one component at a time from an open descriptor of the checkout, never
following a symlink (`O_NOFOLLOW`, `dir_fd`; `guard/paths.py`): a guarded path that is a link, or
lies under one, is recorded as the link itself, and a restore replaces a link in its way instead of
writing through it, so nothing here reads or writes outside the checkout.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.guard import (
    CONTENTS_BUDGET,
    COPY_LIMIT,
    CROWDED,
    ENTRY_BUDGET,
    FILE,
    FOLDER_ENTRY_LIMIT,
    FOLDER_READ_LIMIT,
    FOLDER_SEEN_LIMIT,
    LINK,
    READ_BUDGET,
    SPARSE_FROM,
    Entry,
)
from opencode_sandbox.services.guard.paths import (
    DIRECTORY,
    NOT_A_FOLDER,
    allow_descriptors,
    make_folders,
    open_folders,
    put,
)


class OverBudget(Exception):
    """The guarded paths hold more than one snapshot may read (`ENTRY_BUDGET`, `READ_BUDGET`)."""


class Snapshot:
    """The guarded entries of a checkout, and the contents of files up to `COPY_LIMIT` each and
    `CONTENTS_BUDGET` in all. Its memory and the bytes it reads are bounded whatever the VM wrote:
    past a budget it raises `OverBudget`."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.contents: dict[str, bytes] = {}
        self.kept = 0
        self.read = 0
        self.crowded_read = 0
        """What was read of folders recorded whole since: it no longer counts against the budget."""

    def add(self, path: str, entry: Entry) -> None:
        self.entries[path] = entry
        if len(self.entries) > ENTRY_BUDGET:
            raise OverBudget(f"more than {ENTRY_BUDGET} guarded entries (the last: {path})")

    def count_read(self, amount: int, path: str) -> None:
        self.read += amount
        if self.read - self.crowded_read > READ_BUDGET:
            raise OverBudget(f"more than {READ_BUDGET // (1024 * 1024)} MiB in guarded files (the last: {path})")

    def keep(self, path: str, content: bytes) -> None:
        if self.kept + len(content) <= CONTENTS_BUDGET:
            self.contents[path] = content
            self.kept += len(content)

    def crowd(self, path: str, read: int = 0) -> None:
        """Record the folder at `path` whole, dropping what was recorded inside it (`read` bytes)."""
        self.crowded_read += read
        inside = path + "/"
        for each in [each for each in self.entries if each.startswith(inside)]:
            del self.entries[each]
            content = self.contents.pop(each, None)
            self.kept -= len(content) if content is not None else 0
        self.entries[path] = Entry(CROWDED)


def take_snapshot(root: Path, guarded: Sequence[str]) -> Snapshot:
    allow_descriptors()
    snapshot = Snapshot()
    root_fd = os.open(root, DIRECTORY)
    try:
        for path in guarded:
            _record_path(root_fd, path, snapshot)
    finally:
        os.close(root_fd)
    return snapshot




def _record_path(root_fd: int, path: str, snapshot: Snapshot) -> None:
    parts = path.split("/")
    with _descend(root_fd, parts[:-1], snapshot) as (folder, _):
        if folder is None:
            return
        try:
            found = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return  # a folder on the way this user cannot search: what is in it cannot reach them either
        if stat.S_ISDIR(found.st_mode):
            _record_folder(folder, parts[-1], path, snapshot)
        else:
            _record_one(folder, parts[-1], path, found, snapshot)


@contextlib.contextmanager
def _descend(root_fd: int, parts: Sequence[str], snapshot: Snapshot | None) -> Iterator[tuple[int | None, str]]:
    """The open folder at `parts`, or None where a component is missing or is no folder (a
    link or a file there is recorded in `snapshot` instead: `.git` as a worktree's pointer file)."""
    folder = root_fd
    try:
        for index, part in enumerate(parts):
            try:
                opened = os.open(part, DIRECTORY, dir_fd=folder)
            except (FileNotFoundError, PermissionError):
                yield None, ""
                return
            except OSError as error:
                if error.errno not in NOT_A_FOLDER:
                    raise
                if snapshot is not None:
                    found = os.stat(part, dir_fd=folder, follow_symlinks=False)
                    _record_one(folder, part, "/".join(parts[:index + 1]), found, snapshot)
                yield None, ""
                return
            if folder != root_fd:
                os.close(folder)  # only the way's last folder stays open, however deep the path
            folder = opened
        yield folder, "/".join(parts)
    finally:
        if folder != root_fd:
            os.close(folder)


class _Level:
    """One open folder of a guarded folder's walk: its entries and the bytes read below it, less
    what its crowded subfolders hold."""

    def __init__(self, descriptor: int, path: str, names: list[str], snapshot: Snapshot) -> None:
        self.descriptor = descriptor
        self.path = path
        self.names = iter(names)
        self.entries = len(names) if len(names) > FOLDER_ENTRY_LIMIT else 0
        self.read_from = _counted_read(snapshot)

    def crowded(self, snapshot: Snapshot) -> bool:
        return (self.entries > FOLDER_ENTRY_LIMIT
                or _counted_read(snapshot) - self.read_from > FOLDER_READ_LIMIT)


def _counted_read(snapshot: Snapshot) -> int:
    return snapshot.read - snapshot.crowded_read


def _record_folder(parent: int, name: str, path: str, snapshot: Snapshot) -> None:
    """Everything in the folder, however deep; a folder this user cannot read is left out (the walk
    names it), as what is in it cannot reach them. The smallest folder that holds too much is
    recorded whole (`Snapshot.crowd`), so a big `node_modules` beside a plugin folder leaves the
    plugins recorded file by file."""
    try:
        first = os.open(name, DIRECTORY, dir_fd=parent)
    except PermissionError:
        return
    # A stack rather than recursion: the VM picks the depth. Each level's folder is open while its
    # entries are looked at.
    names = listing(first)
    seen = len(names)
    stack = [_Level(first, path, names, snapshot)]
    whole = stack[0]
    try:
        while stack:
            if seen > FOLDER_SEEN_LIMIT:
                for level in stack[1:]:
                    os.close(level.descriptor)
                del stack[1:]
                whole.entries = seen
            level = stack[-1]
            item = None if level.crowded(snapshot) else next(level.names, None)
            if item is None:
                stack.pop()
                os.close(level.descriptor)
                counted = 1
                if level.crowded(snapshot):
                    snapshot.crowd(level.path, _counted_read(snapshot) - level.read_from)
                else:
                    counted += level.entries
                if stack:
                    stack[-1].entries += counted
                continue
            child = f"{level.path}/{item}"
            try:
                found = os.stat(item, dir_fd=level.descriptor, follow_symlinks=False)
            except (FileNotFoundError, PermissionError):
                continue
            if not stat.S_ISDIR(found.st_mode):
                _record_one(level.descriptor, item, child, found, snapshot)
                level.entries += 1
                continue
            try:
                inner = os.open(item, DIRECTORY, dir_fd=level.descriptor)
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.EACCES, errno.EMFILE, *NOT_A_FOLDER):
                    continue  # gone, closed to this user, or past every descriptor it may open: the walk says so
                raise
            names = listing(inner)
            seen += len(names)
            stack.append(_Level(inner, child, names, snapshot))
    finally:
        for level in stack:
            os.close(level.descriptor)


def listing(folder: int) -> list[str]:
    """The folder's names, sorted; at most one more than `FOLDER_ENTRY_LIMIT`, enough to tell a
    crowded folder, so a listing of millions never sits in memory."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > FOLDER_ENTRY_LIMIT:
                    break
    except PermissionError:
        return []
    return sorted(names)


def _record_one(folder: int, name: str, path: str, found: os.stat_result, snapshot: Snapshot) -> None:
    if stat.S_ISLNK(found.st_mode):
        target = os.readlink(name, dir_fd=folder)
        snapshot.add(path, Entry(LINK, 0, len(target), sha256(target.encode()).hexdigest(), target))
        return
    if not stat.S_ISREG(found.st_mode):
        return  # a fifo or a socket: nothing the host runs, and reading one could block
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except PermissionError:
        # Another owner's private file (root in the VM made it): known by its identity, never read.
        identity = f"unreadable {found.st_uid}:{found.st_ino}:{found.st_size}:{found.st_mtime_ns}"
        snapshot.add(path, Entry(FILE, found.st_mode & 0o7777, found.st_size, sha256(identity.encode()).hexdigest()))
        return
    digest, kept, size = sha256(), bytearray(), 0
    with os.fdopen(descriptor, "rb") as handle:
        opened = os.fstat(handle.fileno())
        mode = opened.st_mode & 0o7777
        sparse = opened.st_size >= SPARSE_FROM and opened.st_blocks * 512 < opened.st_size // 2
        if opened.st_size > COPY_LIMIT or sparse:
            # Known by its identity, never read: the VM can make a file of terabytes that takes no
            # disk (sparse), and reading it would hold the round and the guard's lock for hours.
            # Any write moves its change time, which no process can set.
            identity = f"large {opened.st_ino}:{opened.st_size}:{opened.st_mtime_ns}:{opened.st_ctime_ns}"
            snapshot.add(path, Entry(FILE, mode, opened.st_size, sha256(identity.encode()).hexdigest()))
            return
        snapshot.count_read(opened.st_size, path)
        while chunk := handle.read(min(1 << 16, COPY_LIMIT + 1 - size)):
            digest.update(chunk)
            size += len(chunk)
            kept += chunk
            if size > COPY_LIMIT:
                break
    if size > COPY_LIMIT:  # it grew while read: known by its identity, as a large one
        identity = f"large {opened.st_ino}:{size}:{opened.st_mtime_ns}:{opened.st_ctime_ns}:grown"
        snapshot.add(path, Entry(FILE, mode, size, sha256(identity.encode()).hexdigest()))
        return
    snapshot.add(path, Entry(FILE, mode, size, digest.hexdigest()))
    snapshot.keep(path, bytes(kept))


def restore(root: Path, path: str, entry: Entry | None, content: bytes | None) -> None:
    """Make `path` hold `entry` again (None: nothing), replacing whatever is in the way."""
    parts = path.split("/")
    root_fd = os.open(root, DIRECTORY)
    try:
        folder = make_folders(root_fd, parts[:-1]) if entry is not None else open_folders(root_fd, parts[:-1])
        if folder is None:
            return
        try:
            put(folder, parts[-1], entry, content)
        finally:
            if folder != root_fd:
                os.close(folder)
    finally:
        os.close(root_fd)


