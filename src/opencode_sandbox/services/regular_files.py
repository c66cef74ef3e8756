"""Reading files from the host for the VM without following a link: each regular file of a tree
is read through descriptors opened relative to its folder, so nothing renamed or replaced with a
link, a device, a FIFO or a socket while it is read is ever opened in its place."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from opencode_sandbox.core.records import Record

_NO_LINK = os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | _NO_LINK
# Non-blocking so a FIFO put in a file's place between the look and the open cannot hang the read.
_FILE = os.O_RDONLY | os.O_NONBLOCK | _NO_LINK


class Content(Record):
    """A file's content as read, or as made here."""

    data: bytes
    mode: int
    mtime: int


class Tree(Record):
    files: dict[str, Content]
    """Path relative to the tree's top ("" for a top that is a file) -> content."""
    skipped: list[str]
    """Paths, relative likewise, that are not regular files or folders (links included), or that
    this user cannot read."""


def read_tree(top: Path, within: Path | None = None) -> Tree:
    """Every regular file at or below `top`; nothing when `top` is missing. Without `within`, `top`
    itself may be a link (one the user made to their own files); with it, `top` lies below the
    folder `within` and no link from there down is followed. No link below `top` ever is."""
    tree = Tree({}, [])
    if within is None:
        parent, name = _open(top.parent, _FOLDER & ~os.O_NOFOLLOW), top.name
        follow = True
    else:
        *folders, name = top.relative_to(within).parts
        parent = _open_below(within, folders)
        follow = False
    if parent is None:
        return tree
    try:
        try:
            found = os.stat(name, dir_fd=parent, follow_symlinks=follow)
        except (FileNotFoundError, NotADirectoryError):
            return tree
        link_flag = 0 if follow else os.O_NOFOLLOW
        if stat.S_ISDIR(found.st_mode):
            folder = _open(name, (_FOLDER & ~os.O_NOFOLLOW) | link_flag, parent)
            if folder is None:
                tree.skipped.append("")
                return tree
            try:
                _read_folder(folder, "", tree)
            finally:
                os.close(folder)
        elif stat.S_ISREG(found.st_mode):
            _read_file(name, parent, "", (_FILE & ~os.O_NOFOLLOW) | link_flag, tree)
        else:
            tree.skipped.append("")
    finally:
        os.close(parent)
    return tree


def _open_below(within: Path, folders: list[str]) -> int | None:
    folder = _open(within, _FOLDER & ~os.O_NOFOLLOW)
    for name in folders:
        if folder is None:
            return None
        inner = _open(name, _FOLDER, folder)
        os.close(folder)
        folder = inner
    return folder


MAX_DEPTH = 64
"""Folders nested deeper below a tree's top are not read (they are `skipped`): a checkout's folders,
which a repository chooses, may nest past the interpreter's recursion limit."""


def _read_folder(folder: int, prefix: str, tree: Tree, depth: int = 1) -> None:
    for name in sorted(os.listdir(folder)):
        path = f"{prefix}{name}"
        try:
            found = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(found.st_mode):
            inner = _open(name, _FOLDER, folder) if depth < MAX_DEPTH else None
            if inner is None:
                tree.skipped.append(path)
                continue
            try:
                _read_folder(inner, f"{path}/", tree, depth + 1)
            finally:
                os.close(inner)
        elif stat.S_ISREG(found.st_mode):
            _read_file(name, folder, path, _FILE, tree)
        else:
            tree.skipped.append(path)


def _read_file(name: str, folder: int, path: str, flags: int, tree: Tree) -> None:
    descriptor = _open(name, flags, folder)
    if descriptor is None:
        tree.skipped.append(path)
        return
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            tree.skipped.append(path)
            return
        with os.fdopen(descriptor, "rb", closefd=False) as opened:
            data = opened.read()
        tree.files[path] = Content(data, found.st_mode & 0o777, int(found.st_mtime))
    finally:
        os.close(descriptor)


def _open(name: str | Path, flags: int, folder: int | None = None) -> int | None:
    """None when what is there now is a link, not what was looked at (it changed meanwhile) or
    not readable by this user."""
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ENXIO, errno.EACCES):
            return None
        raise
