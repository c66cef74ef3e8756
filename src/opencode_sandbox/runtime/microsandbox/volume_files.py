"""Filling a directory volume's host folder: from a folder of an image (as a tar stream) or another volume.

msb serves a directory volume with the invoking host user's identity: the files belong to that
user on the host, and each file's owner and mode as the guest sees them are kept in its
`user.msb.override_stat` extended attribute (as msb records them for files the guest creates).
A file owned on the host by anyone else is out of the guest's reach, so the image's owners go
into that attribute, never onto the host file. Modes, symlinks, hard links and times are kept.
Nothing here needs a running VM.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import subprocess
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from opencode_sandbox.errors import SandboxError

OVERRIDE_STAT = "user.msb.override_stat"
_OVERRIDE_STAT_VERSION = 1


def extract_archive(archive: IO[bytes], destination: Path) -> None:
    """Unpack a folder's tar stream (entries under the folder's own name) into `destination`."""
    # An empty or broken stream: the exit status of its writer tells which.
    with contextlib.suppress(tarfile.ReadError):
        _extract_stream(archive, destination)


def _extract_stream(stream: IO[bytes], destination: Path) -> None:
    root = destination.resolve()
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            relative = _strip_first(member.name)
            if relative is None:
                if member.isdir():
                    _apply_folder_metadata(member, root)
                continue
            _refuse_escape(root, relative)
            member.name = str(relative)
            if member.islnk():
                link = _strip_first(member.linkname)
                if link is None:
                    continue
                member.linkname = str(link)
            guest_owner = (member.uid, member.gid)
            member.uid, member.gid = os.getuid(), os.getgid()
            archive.extract(member, root, numeric_owner=True, filter="fully_trusted")
            if not member.issym():
                record_guest_stat(root / relative, *guest_owner, member.mode)


def _apply_folder_metadata(member: tarfile.TarInfo, root: Path) -> None:
    """The copied folder itself becomes the volume's root: its owner and mode carry over."""
    root.chmod((member.mode & 0o7777) | 0o700)
    record_guest_stat(root, member.uid, member.gid, member.mode)


def guest_stat(uid: int, gid: int, mode: int) -> bytes:
    """The `user.msb.override_stat` value: version, uid, gid, st_mode (type and bits), rdev."""
    return struct.pack("<IIIII", _OVERRIDE_STAT_VERSION, uid, gid, mode, 0)


def record_guest_stat(path: Path, uid: int, gid: int, permissions: int) -> None:
    """Make the guest see `path` owned by uid:gid with `permissions`; symlinks cannot carry it."""
    host_mode = path.lstat().st_mode
    value = guest_stat(uid, gid, stat.S_IFMT(host_mode) | (permissions & 0o7777))
    writable = host_mode | stat.S_IWUSR
    if os.geteuid() != 0 and host_mode != writable:
        # Setting a user attribute needs write access to the file.
        path.chmod(stat.S_IMODE(writable))
        try:
            os.setxattr(path, OVERRIDE_STAT, value)
        finally:
            path.chmod(stat.S_IMODE(host_mode))
        return
    os.setxattr(path, OVERRIDE_STAT, value)


def _strip_first(name: str) -> PurePosixPath | None:
    """The stream names every entry below the source folder's own name (as `docker cp SRC -`); drop it."""
    parts = PurePosixPath(name).parts
    return PurePosixPath(*parts[1:]) if len(parts) > 1 else None


def _refuse_escape(root: Path, relative: PurePosixPath) -> None:
    if relative.is_absolute() or ".." in relative.parts:
        raise SandboxError(f"refusing archive entry outside the volume: {relative}")
    parent = root
    for part in relative.parts[:-1]:
        parent = parent / part
        if parent.is_symlink():
            raise SandboxError(f"refusing archive entry below a symlink: {relative}")


def copy_tree_onto(source: Path, target: Path) -> None:
    """Copy every file of `source` on top of `target` (`cp -a`: owners, modes, symlinks, and the
    extended attributes that hold the guest's owners)."""
    completed = subprocess.run(["cp", "-a", f"{source}/.", f"{target}/"], capture_output=True, check=False)
    if completed.returncode != 0:
        message = completed.stderr.decode(errors="replace").strip()
        raise SandboxError(f"copying {source} to {target} failed: {message}", hint="check free disk space")


def is_empty_folder(folder: Path) -> bool:
    return not any(folder.iterdir())
