"""What the guard takes from the checkout, moved aside into the review folder (in the project's
private state folder, out of the VM's reach) and stripped of execute bits: by a rename from folder
descriptor to folder descriptor, or a bounded copy where the review folder lies on another file
system."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from opencode_sandbox.core.guard import (
    FILE,
    Entry,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.services.guard.files import listing
from opencode_sandbox.services.guard.paths import (
    DIRECTORY,
    allow_descriptors,
    make_folders,
    open_folders,
    put,
    remove,
)
from opencode_sandbox.state.files import ensure_private_dir

STRIP_DEPTH_LIMIT = 256
"""How deep into a folder moved aside its files lose their execute bits: the VM picks the depth."""


MOVE_COPY_LIMIT = 64 * 1024 * 1024
"""The most one move keeps when the review folder lies on another file system than the checkout
and what is moved must be copied: the VM picks the size (a sparse file of terabytes takes no disk),
and the state folder may be on a smaller disk. Beyond it nothing is kept, and the VM's entry is
removed all the same."""
ENTRY_COST = 4096
"""What each file, folder or link copied counts for against `MOVE_COPY_LIMIT` besides its content:
a million empty files cost no bytes, but time and inodes."""


class Aside(Record):
    """What `move_aside` did with what the VM made."""

    kept: str = ""
    """Where it is now, an absolute path in the review folder; "" when nothing of it could be kept."""
    not_kept: str = ""
    """Why nothing of it was kept ("larger than 64 MiB"), when so: it was removed all the same."""

    def where(self) -> str:
        return self.kept or f"removed (not kept: {self.not_kept})"


def move_aside(root: Path, path: str, review: Path) -> Aside | None:
    """Move what is at `path` (relative to the checkout) out of the checkout, to the same path
    below the folder `review` (the project's private state folder's, out of the VM's reach),
    stripped of execute bits. None when nothing was there.

    A rename from folder descriptor to folder descriptor, never following a link; where the
    review folder lies on another file system, a copy that follows no link either, up to
    `MOVE_COPY_LIMIT`, then the original removed. What cannot be copied (too large, unreadable)
    leaves no part of a copy behind and is removed all the same: nothing the guard takes from the
    VM stays where the host runs it."""
    allow_descriptors()
    parts = path.split("/")
    root_fd = os.open(root, DIRECTORY)
    source: int | None = None
    opened: set[int] = set()
    try:
        source = open_folders(root_fd, parts[:-1])
        if source is None:
            return None
        opened.add(source)
        try:
            found = os.stat(parts[-1], dir_fd=source, follow_symlinks=False)
        except FileNotFoundError:
            return None
        review_fd = os.open(review, DIRECTORY)
        opened.add(review_fd)
        target = make_folders(review_fd, parts[:-1])
        opened.add(target)
        try:
            if stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
                # Linked elsewhere too (a hard link the VM made): moved, the file kept for review would
                # still be the VM's to write through the other name. A copy is the VM's no more.
                raise OSError(errno.EXDEV, "a file with more than one name")
            os.rename(parts[-1], parts[-1], src_dir_fd=source, dst_dir_fd=target)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            not_kept = _copy_then_remove(source, parts[-1], target)
            if not_kept:
                _remove_empty_folders(review_fd, parts[:-1])
                return Aside("", not_kept)
        else:
            _without_execute_bits(target, parts[-1])
        return Aside(os.path.join(review, *parts))
    finally:
        for descriptor in opened - {root_fd}:
            os.close(descriptor)
        os.close(root_fd)


def _remove_empty_folders(review: int, parts: Sequence[str]) -> None:
    """The folders made in `review` for what could not be kept, those left empty."""
    for end in range(len(parts), 0, -1):
        try:
            os.rmdir("/".join(parts[:end]), dir_fd=review)
        except OSError:
            return


class _TooLarge(Exception):
    pass


COPY_QUOTA = 256 * 1024 * 1024
"""The most one process (the idle reaper, over a whole VM session) copies into the review folder
across file systems; a rename within one costs nothing and is not counted."""


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit

    def take(self, amount: int) -> None:
        if amount > self.left:
            raise _TooLarge
        self.left -= amount


_copied = _Budget(COPY_QUOTA)
"""What this process may still copy across file systems into the review folder, all moves together."""


def _copy_then_remove(source: int, name: str, target: int) -> str:
    """`name` copied from the folder `source` into the folder `target` (`_copy`), then removed
    from `source`; why nothing was kept, or "". A copy that fails is removed again, and so is one
    whose original cannot be removed: the next round would copy it once more. Each copy costs real
    disk, which the VM's files need not (sparse, or made again after every move): past
    `COPY_QUOTA` for the process, nothing more is copied, only removed."""
    allowed = min(MOVE_COPY_LIMIT, _copied.left)
    budget = _Budget(allowed)
    try:
        _copy(source, name, target, budget)
        not_kept = ""
    except _TooLarge:
        not_kept = (f"larger than {MOVE_COPY_LIMIT >> 20} MiB" if allowed == MOVE_COPY_LIMIT else
                    f"the copies kept for review passed {COPY_QUOTA >> 20} MiB, on another file system than "
                    "the checkout's")
    except OSError as error:
        not_kept = error.strerror or str(error)
    if not_kept:
        remove(target, name)
    else:
        _copied.left -= allowed - budget.left
    try:
        remove(source, name)
    except OSError:
        if not not_kept:
            remove(target, name)
        raise
    return not_kept


def _copy(source: int, name: str, target: int, budget: _Budget) -> None:
    """`name` in the folder `source` copied to the same name in `target` without following a link,
    however deep (a list, not recursion: the VM picks the depth): folders private to the user,
    files without execute, set-user-ID or set-group-ID bits, links as they are, anything else (a
    FIFO, a socket) left out. Raises `_TooLarge` past `budget`."""
    found = os.stat(name, dir_fd=source, follow_symlinks=False)
    if not stat.S_ISDIR(found.st_mode):
        _copy_entry(source, name, target, found, budget)
        return
    stack: list[tuple[int, int, Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append(_copy_folder(source, name, target, budget))
        while stack:
            inner_source, inner_target, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                os.close(stack.pop()[0])
                os.close(inner_target)
                continue
            found = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(found.st_mode):
                stack.append(_copy_folder(inner_source, entry.name, inner_target, budget))
            else:
                _copy_entry(inner_source, entry.name, inner_target, found, budget)
    finally:
        for inner_source, inner_target, listing in stack:
            os.close(inner_source)
            os.close(inner_target)
            close = getattr(listing, "close", None)
            if close is not None:
                close()


def _copy_folder(source: int, name: str, target: int, budget: _Budget
                 ) -> tuple[int, int, Iterator[os.DirEntry[str]]]:
    budget.take(ENTRY_COST)
    opened = os.open(name, DIRECTORY, dir_fd=source)
    made = -1
    try:
        os.mkdir(name, 0o700, dir_fd=target)
        made = os.open(name, DIRECTORY, dir_fd=target)
        return opened, made, os.scandir(opened)
    except BaseException:
        os.close(opened)
        if made >= 0:
            os.close(made)
        raise


def _copy_entry(source: int, name: str, target: int, found: os.stat_result, budget: _Budget) -> None:
    if stat.S_ISLNK(found.st_mode):
        link = os.readlink(name, dir_fd=source)
        budget.take(ENTRY_COST + len(os.fsencode(link)))
        os.symlink(link, name, dir_fd=target)
    elif stat.S_ISREG(found.st_mode):
        _copy_file(source, name, target, budget)


def _copy_file(source: int, name: str, target: int, budget: _Budget) -> None:
    descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=source)
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode):
            return  # replaced meanwhile by what holds nothing to keep
        budget.take(ENTRY_COST)
        if opened.st_size > budget.left:
            raise _TooLarge  # never read: a sparse file of terabytes takes no disk
        mode = opened.st_mode & 0o666
        copy = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=target)
        try:
            while chunk := os.read(descriptor, 1 << 16):
                budget.take(len(chunk))  # the VM may make it grow while it is read
                view = memoryview(chunk)
                while view:
                    view = view[os.write(copy, view):]
            os.fchmod(copy, mode)
        finally:
            os.close(copy)
    finally:
        os.close(descriptor)


def new_review_folder(parent: Path, stamp: str) -> Path:
    """A folder in `parent` (made private to the user where missing) named by `stamp`, made now
    and so never one already used."""
    ensure_private_dir(parent)
    for attempt in range(1, 1000):
        folder = parent / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(str(parent / stamp))


def _without_execute_bits(folder: int, name: str, depth: int = 0) -> None:
    """Nothing kept for review is meant to run: files lose their execute bits, in folders too, down
    to `STRIP_DEPTH_LIMIT` levels. A file of another owner, which cannot be changed, is replaced by
    a copy of this user's."""
    found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISREG(found.st_mode):
        try:
            descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except PermissionError:
            return  # another owner's private file: only its owner can read or run it
        try:
            os.fchmod(descriptor, found.st_mode & 0o666)
        except PermissionError:
            with os.fdopen(os.dup(descriptor), "rb") as source:
                put(folder, name, Entry(FILE, found.st_mode & 0o666), source.read())
        finally:
            os.close(descriptor)
    elif stat.S_ISDIR(found.st_mode) and depth < STRIP_DEPTH_LIMIT:
        try:
            inner = os.open(name, DIRECTORY, dir_fd=folder)
        except PermissionError:
            return
        try:
            for item in listing(inner):
                _without_execute_bits(inner, item, depth + 1)
        finally:
            os.close(inner)


