"""Paths below a folder, one component at a time from open descriptors, never following a link:
open them, make them, put an entry there, remove one however deep."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from opencode_sandbox.core.guard import (
    LINK,
    Entry,
)

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NOT_A_FOLDER = (errno.ELOOP, errno.ENOTDIR)
DESCRIPTORS_WANTED = 1 << 16
"""The walk and the snapshot hold a descriptor for each level of the folder they look into, and the
VM picks the depth: the process may open this many (up to its hard limit) rather than a login's
usual 1024. A folder that still cannot be opened is named as not walked."""


def allow_descriptors() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = DESCRIPTORS_WANTED if hard == resource.RLIM_INFINITY else min(hard, DESCRIPTORS_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@contextlib.contextmanager
def opened_folder(root: Path, parts: Sequence[str]) -> Iterator[int | None]:
    """The folder at `parts` below the checkout, open while in the block; None when one is
    missing or no folder."""
    root_fd = os.open(root, DIRECTORY)
    folder: int | None = None
    try:
        folder = open_folders(root_fd, parts)
        yield folder
    finally:
        if folder is not None and folder != root_fd:
            os.close(folder)
        os.close(root_fd)


def open_folders(root_fd: int, parts: Sequence[str]) -> int | None:
    """The folder at `parts`, opened; None when one is missing or no folder (nothing beneath)."""
    return _folders(root_fd, parts, make=False)


def make_folders(root_fd: int, parts: Sequence[str]) -> int:
    """The folder at `parts`, made where missing; a link or file in the way is removed first."""
    folder = _folders(root_fd, parts, make=True)
    assert folder is not None
    return folder


def _folders(root_fd: int, parts: Sequence[str], make: bool) -> int | None:
    folder = root_fd
    for part in parts:
        try:
            opened = os.open(part, DIRECTORY, dir_fd=folder)
        except OSError as error:
            if error.errno not in (errno.ENOENT, *NOT_A_FOLDER):
                raise
            opened = -1
            if make:
                if error.errno != errno.ENOENT:
                    os.unlink(part, dir_fd=folder)
                os.mkdir(part, 0o755, dir_fd=folder)
                opened = os.open(part, DIRECTORY, dir_fd=folder)
        if folder != root_fd:
            os.close(folder)
        if opened < 0:
            return None
        folder = opened
    return folder


def put(folder: int, name: str, entry: Entry | None, content: bytes | None) -> None:
    if entry is None:
        remove(folder, name)
        return
    staging = f".{name}.{os.urandom(6).hex()}"
    if entry.kind == LINK:
        os.symlink(entry.target, staging, dir_fd=folder)
    else:
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=folder)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content or b"")
            os.fchmod(handle.fileno(), entry.mode & 0o777)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            remove(folder, name)
    os.rename(staging, name, src_dir_fd=folder, dst_dir_fd=folder)


def remove(folder: int, name: str) -> None:
    """`name` in the open `folder` removed, however deep (a list, not recursion: the VM picks the
    depth), never following a link; a folder of the user's that the VM closed is opened again."""
    try:
        found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(found.st_mode):
        os.unlink(name, dir_fd=folder)
        return
    stack: list[tuple[int, str, int, Iterator[os.DirEntry[str]]]] = []
    retries = _REMOVE_RETRIES
    try:
        stack.append((folder, name, *_opened_to_empty(folder, name)))
        while stack:
            parent, here, inner, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                stack.pop()
                _close_listing(listing)
                os.close(inner)
                try:
                    os.rmdir(here, dir_fd=parent)
                except OSError as error:
                    if error.errno != errno.ENOTEMPTY or not retries:
                        raise
                    retries -= 1  # the VM wrote in it meanwhile: once more
                    stack.append((parent, here, *_opened_to_empty(parent, here)))
                continue
            if entry.is_dir(follow_symlinks=False):
                try:
                    stack.append((inner, entry.name, *_opened_to_empty(inner, entry.name)))
                    continue
                except OSError as error:
                    if error.errno not in NOT_A_FOLDER:
                        raise  # replaced by a link or a file meanwhile: unlinked below
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=inner)
    finally:
        for _, _, inner, listing in stack:
            _close_listing(listing)
            os.close(inner)


_REMOVE_RETRIES = 16
"""How often a removal lists a folder again that the VM wrote in while it was emptied."""


def _opened_to_empty(parent: int, name: str) -> tuple[int, Iterator[os.DirEntry[str]]]:
    opened = os.open(name, DIRECTORY, dir_fd=parent)
    try:
        found = os.fstat(opened)
        wanted = stat.S_IRWXU
        if found.st_uid == os.geteuid() and found.st_mode & wanted != wanted:
            os.fchmod(opened, stat.S_IMODE(found.st_mode) | wanted)
        return opened, os.scandir(opened)
    except BaseException:
        os.close(opened)
        raise


def _close_listing(listing: Iterator[os.DirEntry[str]]) -> None:
    close = getattr(listing, "close", None)
    if close is not None:
        close()


