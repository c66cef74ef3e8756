"""Neutralising a privileged entry the VM made below the checkout (`core.guard_privileged`): a
file loses its set-user-ID and set-group-ID bits and its capabilities, a device node is removed.

Each step acts on the entry it checked: opened from its folder's descriptor as an `O_PATH |
O_NOFOLLOW` descriptor, which `fstat` shows is a regular file or a device node (a link opened so
is the link itself, and is left alone); a file is changed through `/proc/self/fd/N`, which is that
file whatever its name is by then, a device node is removed after `fstatat` shows the same node
still there. Nothing is done through a link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Collection
from pathlib import Path

from opencode_sandbox.core.guard_privileged import (
    CAPABILITY_ATTRIBUTE,
    IN_PLACE,
    REMOVED,
    REPLACED,
    SET_ID_BITS,
    Caught,
    Privileged,
    done_text,
    fix_command,
    needs_capability_check,
)
from opencode_sandbox.services.guard import paths as guard_paths
from opencode_sandbox.services.guard import walk as guard_walk

_NO_CAPABILITY = (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)


def neutralise(root: Path, found: Privileged, known: Collection[Privileged] = ()) -> Caught | None:
    """What was done about the entry at `found`'s path; None when nothing privileged is there now,
    or only one of `known` (the user's). Whatever privileged entry is there now is neutralised,
    as a VM that swaps in a new file at every round must not slip through."""
    parts = found.path.split("/")
    try:
        with guard_paths.opened_folder(root, parts[:-1]) as folder:
            return None if folder is None else _neutralise_in(folder, parts[-1], found.path, known)
    except FileNotFoundError:
        return None  # gone, or replaced while it was being neutralised: the next walk judges
    except OSError as error:
        return Caught(found, "", error.strerror or str(error), fix_command(found, str(root / found.path), os.geteuid()))


def _neutralise_in(folder: int, name: str, path: str, known: Collection[Privileged]) -> Caught | None:
    handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        now = os.fstat(handle)  # a link opened so is the link itself: never privileged, never followed
        reopened = f"/proc/self/fd/{handle}"  # the entry `handle` holds, whatever its name is now
        capability = _capability(reopened) if stat.S_ISREG(now.st_mode) else b""
        current = guard_walk.privileged_entry(
            path, now, capability if needs_capability_check(now.st_mode) else b"")
        if current is None or current in known:
            return None
        if current.is_device:
            return Caught(current, done_text(current, _remove(folder, name, now)))
        return Caught(current, done_text(current, _strip_file(folder, name, reopened, now, capability)))
    finally:
        os.close(handle)


def _strip_file(folder: int, name: str, reopened: str, now: os.stat_result, capability: bytes) -> str:
    try:
        if now.st_mode & SET_ID_BITS:
            os.chmod(reopened, stat.S_IMODE(now.st_mode) & ~SET_ID_BITS)
        if capability:
            os.removexattr(reopened, CAPABILITY_ATTRIBUTE)
        return IN_PLACE
    except PermissionError:
        return REPLACED if _replace_by_copy(folder, name, reopened, now) else _remove(folder, name, now)


def _capability(reopened: str) -> bytes:
    try:
        return os.getxattr(reopened, CAPABILITY_ATTRIBUTE)
    except OSError as error:
        if error.errno in _NO_CAPABILITY:
            return b""
        raise


def _replace_by_copy(folder: int, name: str, reopened: str, now: os.stat_result) -> bool:
    """Another owner's file (or a capability only root may remove): a copy of the host user's,
    which has neither, takes its place. False when it cannot be read."""
    import shutil

    try:
        reading = os.fdopen(os.open(reopened, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    except PermissionError:
        return False
    staging = f".opencode-sandbox-{os.urandom(6).hex()}"
    try:
        target = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=folder)
        with reading, os.fdopen(target, "wb") as writing:
            shutil.copyfileobj(reading, writing, 1 << 20)
            os.fchmod(writing.fileno(), stat.S_IMODE(now.st_mode) & 0o777)
        _still_the_same(folder, name, now)
        os.rename(staging, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        reading.close()
        with contextlib.suppress(OSError):
            os.unlink(staging, dir_fd=folder)
        raise
    return True


def _remove(folder: int, name: str, now: os.stat_result) -> str:
    _still_the_same(folder, name, now)
    os.unlink(name, dir_fd=folder)
    return REMOVED


def _still_the_same(folder: int, name: str, now: os.stat_result) -> None:
    again = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if (again.st_dev, again.st_ino) != (now.st_dev, now.st_ino):
        raise FileNotFoundError(errno.ENOENT, "replaced while it was being neutralised", name)
