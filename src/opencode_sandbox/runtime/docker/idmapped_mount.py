"""Id-mapped mounts of a host folder, made by a root host user for the docker runtime.

A container shares the host kernel's ids, so for a root host user a bind-mounted checkout is
writable in the container only by uid 0. An id-mapped mount (Linux 5.12 and newer, on file
systems that support it: ext4, xfs, btrfs, tmpfs and others) shows files that host uid and gid 0
own as owned by `dev`'s uid and gid, and writes what `dev` creates as owned by 0 on disk; no
other id is mapped, so uid 0 in the container can neither create nor take over a file there.

Made with the kernel's mount API (`open_tree`, `mount_setattr`, `move_mount`) through ctypes:
Python has no binding for it, and util-linux's `mount --map-users` is missing from the
distributions still in wide use. The user namespace that carries the mapping is a child's
(`unshare --user`), held only while the mount is made.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Iterator
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.errors import BootFailed

if TYPE_CHECKING:
    import subprocess

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
"""The same numbers on every architecture: the mount API came after the syscall tables merged."""
OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
MOUNT_ATTR_IDMAP = 0x00100000
MOUNT_ATTR_NOSUID = 0x00000002
MOUNT_ATTR_NODEV = 0x00000004
MOVE_MOUNT_F_EMPTY_PATH = 0x00000004
AT_FDCWD = -100
MNT_DETACH = 2

MOUNTS_ROOT = Path("/run/opencode-sandbox/mapped")
"""On the host's /run: gone with a reboot, and outside every folder the tool ever removes whole.
Every folder from `/run/opencode-sandbox` down is root's alone (0700): through a mapped mount,
root's files look like uid 1000's, so a host user with that uid must never reach one."""


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def _private_folders(folder: Path) -> None:
    """`folder` and each folder above it up to `/run/opencode-sandbox`, made or kept root's alone,
    none of them a link."""
    import stat

    top = MOUNTS_ROOT.parent
    chain = [folder, *folder.parents]
    for each in reversed(chain[: chain.index(top) + 1]):
        with contextlib.suppress(FileExistsError):
            each.mkdir(mode=0o700)
        found = os.lstat(each)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0:
            raise OSError(f"{each} is not a folder of root's")
        if stat.S_IMODE(found.st_mode) != 0o700:
            os.chmod(each, 0o700)


def mapped_path(vm: str, index: int) -> Path:
    return MOUNTS_ROOT / vm / str(index)


def _user_namespace(disk_uid: int, disk_gid: int, shown_uid: int,
                    shown_gid: int) -> tuple[int, subprocess.Popen[bytes]]:
    """A user namespace that maps `disk_uid` to `shown_uid` (as a mount using it shows a file the
    disk says `disk_uid` owns), held by a child."""
    import subprocess
    import time

    child = subprocess.Popen(["unshare", "--user", "cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        namespace = f"/proc/{child.pid}/ns/user"
        own = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 30  # milliseconds on an idle host; a loaded one may take longer
        while os.readlink(namespace) == own:
            if child.poll() is not None:
                raise OSError(f"unshare --user failed: {child.stderr.read().decode(errors='replace').strip()}"
                              if child.stderr else "unshare --user failed")
            if time.monotonic() > deadline:
                raise OSError("unshare --user did not make a user namespace within 30 s")
            time.sleep(0.001)
        Path(f"/proc/{child.pid}/uid_map").write_text(f"{disk_uid} {shown_uid} 1\n")
        Path(f"/proc/{child.pid}/gid_map").write_text(f"{disk_gid} {shown_gid} 1\n")
        return os.open(namespace, os.O_RDONLY | os.O_CLOEXEC), child
    except BaseException:
        child.kill()
        child.wait()
        raise


def mount_mapped(source: Path, target: Path, *, shown_uid: int, shown_gid: int) -> None:
    """`source` at `target`, its uid 0 and gid 0 shown as `shown_uid` and `shown_gid`, every other id
    unmapped; set-user-ID bits and device nodes have no effect through it."""
    _private_folders(target)
    userns, child = _user_namespace(0, 0, shown_uid, shown_gid)
    tree = -1
    try:
        tree = _check(_libc().syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(source), OPEN_TREE_CLONE | os.O_CLOEXEC),
                      f"cannot clone the mount of {source}")
        attributes = MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, userns)
        _check(_libc().syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attributes),
                             ctypes.sizeof(attributes)), f"cannot map the ids of {source}")
        _check(_libc().syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(target), MOVE_MOUNT_F_EMPTY_PATH),
               f"cannot mount {source} at {target}")
    finally:
        if tree >= 0:
            os.close(tree)
        os.close(userns)
        child.kill()
        child.wait()


def is_mounted(target: Path) -> bool:
    """A mount point at `target` (a bind mount of the same file system included, which
    `os.path.ismount` cannot tell)."""
    wanted = os.fsencode(target).replace(b"\\", b"\\134").replace(b" ", b"\\040")
    try:
        table = Path("/proc/self/mountinfo").read_bytes()
    except OSError:
        return False
    return any(len(fields) > 4 and fields[4] == wanted for fields in (line.split(b" ") for line in table.splitlines()))


def unmount_all(vm: str) -> None:
    """Every mapped mount made for `vm`, and their folders; nothing there is removed but folders."""
    if os.geteuid() != 0:
        return  # only root makes them, and only root may look where they are
    folder = MOUNTS_ROOT / vm
    if not folder.is_dir():
        return
    with held():
        _unmount_folder(folder)


def _unmount_folder(folder: Path) -> None:
    for each in folder.iterdir():
        if is_mounted(each):
            _check(_libc().umount2(os.fsencode(each), MNT_DETACH), f"cannot unmount {each}")
        with contextlib.suppress(OSError):  # not empty: not ours to remove
            each.rmdir()
    with contextlib.suppress(OSError):
        folder.rmdir()


def ensure_mapped(source: Path, target: Path, *, shown_uid: int, shown_gid: int) -> None:
    """The mapped mount of `source` at `target`, made when it is missing (a new VM, or the first
    start after the host rebooted) or holds another folder (one left by a VM of the same name that
    was removed by other means than this tool)."""
    if os.path.realpath(source) != str(source):
        raise BootFailed(f"cannot map {source} for the VM: a folder on its way is a link now",
                         hint="Something replaced a folder on the way with a link; remove the link, "
                              "or remove the VM with `opencode-sandbox stop -f` to mount what the configuration says.")
    try:
        _private_folders(target.parent)  # never the mount point itself: that is the source folder
        if is_mounted(target):
            if _same_folder(source, target):
                return
            _check(_libc().umount2(os.fsencode(target), MNT_DETACH), f"cannot unmount {target}")
        mount_mapped(source, target, shown_uid=shown_uid, shown_gid=shown_gid)
    except OSError as error:
        raise BootFailed(
            f"cannot map your files to dev for the docker runtime: {error.strerror or error}",
            hint="Run opencode-sandbox as an ordinary user, or use the microsandbox runtime: the docker runtime "
                 "keeps the agent off uid 0, and for a root host user it needs id-mapped mounts "
                 "(Linux 5.12 or newer, on a file system that supports them, such as ext4, xfs or btrfs).",
        ) from None


def _same_folder(source: Path, target: Path) -> bool:
    """A bind mount shows its source's own inode, on its device."""
    try:
        at_source, at_target = os.stat(source), os.stat(target)
    except OSError:
        return False
    return (at_source.st_dev, at_source.st_ino) == (at_target.st_dev, at_target.st_ino)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """The mapped mounts to this process alone while it makes or removes some: runs of one project
    may start at once. One lock for all: each holder is done in milliseconds."""
    import fcntl

    _private_folders(MOUNTS_ROOT)
    descriptor = os.open(MOUNTS_ROOT / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
