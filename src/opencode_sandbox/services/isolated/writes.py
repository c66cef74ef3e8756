"""Entries put into the host's work tree without following a link: each folder opened from the one
above it with O_NOFOLLOW, each file written under a temporary name in its folder and renamed into
place, its permissions set exactly."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence

from opencode_sandbox.core.vm_commits import EXECUTABLE, SYMLINK
from opencode_sandbox.services.guard.paths import DIRECTORY, NOT_A_FOLDER

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class InTheWay(Exception):
    """Something on the host stands where the VM's entry would go, and is left as it is."""


def put(top: int, path: str, mode: str, content: bytes) -> None:
    """A regular file (mode 0644, or 0755 for EXECUTABLE) or, for SYMLINK, a link to `content`."""
    *folders, name = path.split("/")
    staging = f".opencode-sandbox-{os.urandom(8).hex()}"
    with _folders(top, folders, make=True) as folder:
        if mode == SYMLINK:
            os.symlink(content, os.fsencode(staging), dir_fd=folder)
        else:
            descriptor = os.open(staging, _NEW_FILE, 0o600, dir_fd=folder)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(content)
                os.fchmod(handle.fileno(), 0o755 if mode == EXECUTABLE else 0o644)
        try:
            os.rename(staging, name, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError as error:
            os.unlink(staging, dir_fd=folder)
            if error.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise InTheWay("a folder is in its place on the host") from None
            raise


def delete(top: int, path: str) -> None:
    """The file or link at `path` removed, then the folders that held only it; a folder is never removed."""
    *folders, name = path.split("/")
    try:
        with _folders(top, folders, make=False) as folder:
            try:
                found = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat.S_ISDIR(found.st_mode):
                raise InTheWay("a folder is in its place on the host")
            os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        return
    _remove_emptied(top, folders)


def _remove_emptied(top: int, folders: Sequence[str]) -> None:
    for depth in range(len(folders), 0, -1):
        try:
            with _folders(top, folders[:depth - 1], make=False) as parent:
                os.rmdir(folders[depth - 1], dir_fd=parent)
        except OSError:
            return


@contextlib.contextmanager
def _folders(top: int, names: Sequence[str], make: bool) -> Iterator[int]:
    """The folder `names` leads to from `top`, open while in the block; missing ones are made when
    `make`, else `FileNotFoundError`. A step that is a link or a file raises `InTheWay`."""
    current = top
    try:
        for depth, name in enumerate(names):
            try:
                inner = os.open(name, DIRECTORY, dir_fd=current)
            except OSError as error:
                if error.errno in NOT_A_FOLDER:
                    raise InTheWay(f"{'/'.join(names[:depth + 1])} is not a folder on the host") from None
                if error.errno != errno.ENOENT or not make:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=current)
                inner = os.open(name, DIRECTORY, dir_fd=current)
            if current != top:
                os.close(current)
            current = inner
        yield current
    finally:
        if current != top:
            os.close(current)
