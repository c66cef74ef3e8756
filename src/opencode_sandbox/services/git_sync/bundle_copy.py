"""The VM's bundle, copied out of its git directory within a bound.

The VM writes the bundle in a folder it owns, so it can make the file anything while the host
looks: a link, a pipe, or a sparse file of terabytes that costs it nothing on disk. The copy opens
it without following a link, takes a regular file only, refuses one larger than the bound by its
size and by its allocated blocks (a hole counts), and reads at most the bound whatever the file
grows to meanwhile. A copy that fails for any reason leaves nothing behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.services.git_sync.host_git import GitSyncError
from opencode_sandbox.state.files import FILE_MODE

if TYPE_CHECKING:
    from typing import BinaryIO

BUNDLE_LIMIT = 512 * 1024 * 1024
"""The most the host copies of one bundle: the VM's new commits since the last sync."""
_CHUNK = 1024 * 1024
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_bundle(folder: Path, name: str, target: Path, limit: int = BUNDLE_LIMIT) -> Path:
    """`folder/name` copied to `target` (made new, private); raises `GitSyncError` when it is not a
    regular file or holds more than `limit` bytes."""
    directory = os.open(folder, _DIRECTORY)
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    finally:
        os.close(directory)
    with os.fdopen(descriptor, "rb") as source:
        described = os.fstat(source.fileno())
        if not stat.S_ISREG(described.st_mode):
            raise GitSyncError("the VM's bundle is not a regular file")
        if max(described.st_size, described.st_blocks * 512) > limit:
            raise GitSyncError(f"the VM's bundle holds {described.st_size} bytes, more than the "
                               f"{limit} the host copies; its commits stay in the VM")
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            with os.fdopen(out, "wb") as copy:
                _copy_within(source, copy, limit)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
    return target


def _copy_within(source: BinaryIO, copy: BinaryIO, limit: int) -> None:
    copied = 0
    while chunk := source.read(min(_CHUNK, limit + 1 - copied)):
        copied += len(chunk)
        if copied > limit:
            raise GitSyncError(f"the VM's bundle grew past the {limit} bytes the host copies while it was copied")
        copy.write(chunk)
