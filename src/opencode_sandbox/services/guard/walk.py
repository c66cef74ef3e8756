"""One walk of the whole checkout, following no link: the git directories, privileged entries,
guarded paths below the top and links into what the tool keeps apart that it finds."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.core.guard import (
    GUARDED_BELOW,
    OLD_REVIEW_FOLDER,
)
from opencode_sandbox.core.guard_privileged import (
    CAPABILITY_ATTRIBUTE,
    Privileged,
    needs_capability_check,
    privileged_kind,
)
from opencode_sandbox.core.guard_privileged import FILE as PRIVILEGED_FILE
from opencode_sandbox.services.guard.files import OverBudget
from opencode_sandbox.services.guard.paths import DIRECTORY, allow_descriptors

_GIT_DIR_SHAPE = frozenset(("HEAD", "objects", "refs"))
_LINKED_GIT_DIR_SHAPE = frozenset(("HEAD", "commondir"))
"""A git directory whose objects and refs lie where its `commondir` file says, as a worktree's
does: git takes it as one, and reads the configuration there."""


class Walk:
    """What one walk of the checkout found (`walk_checkout`)."""

    def __init__(self) -> None:
        self.git_dirs: list[str] = []
        self.privileged: list[Privileged] = []
        self.unwalked: list[str] = []
        """Folders the walk could not look into, each with why: what is in them is not judged."""
        self.links_in: list[str] = []
        """Links below the checkout that lead into what the tool keeps apart from it (`walk_checkout`)."""
        self.guarded_below: list[str] = []
        """The default guarded paths (`core.guard.GUARDED_BELOW`) in the folders below the top whose
        first name is there, as the snapshot takes them."""


def walk_checkout(root: Path, host_git: bool, kept_apart: Sequence[Path] = ()) -> Walk:
    """The checkout walked once, without following a link.

    `git_dirs`: every place below it that git run there would take as a git directory: a `.git`
    folder, file or link anywhere (but the checkout's own when `host_git`: the VM never reaches
    it, and it is not walked), and any folder shaped like a bare repository (HEAD, objects, refs).
    The inside of a git directory is not looked at for these; every other folder is, the one older
    versions kept copies in (`OLD_REVIEW_FOLDER`) too.

    `privileged`: every privileged entry (`core.guard_privileged`) anywhere below, in git
    directories too: a move keeps a file's privileges.

    `guarded_below`: the default guarded paths in every folder below the top, where the walk
    looks for git directories.

    `links_in`: the links there that lead, as a program on the host follows them, into a folder of
    `kept_apart` (the project's state folder, which holds the VM's git directory and the review
    folder) or the folder older versions kept copies in (`OLD_REVIEW_FOLDER`): what the VM wrote
    and the tool set aside from the host, reached again by a path of the checkout that nothing else
    judges.
    """
    allow_descriptors()
    walk = Walk()
    real_root = os.path.realpath(root)
    # the old folder as it lies in the checkout: a link the VM puts there leads nowhere it set apart
    apart = (os.path.join(real_root, OLD_REVIEW_FOLDER), *(os.path.realpath(folder) for folder in kept_apart))
    root_fd = os.open(root, DIRECTORY)
    try:
        _walk_tree(root_fd, walk, host_git, _LinkJudge(real_root, apart))
    finally:
        os.close(root_fd)
    walk.git_dirs.sort(key=_in_walk_order)
    walk.privileged.sort(key=lambda found: _in_walk_order(found.path))
    walk.guarded_below.sort(key=_in_walk_order)
    return walk


def _in_walk_order(path: str) -> list[str]:
    return path.split("/")


_NEEDS_A_LOOK = stat.S_ISUID | stat.S_ISGID | 0o111
"""A regular file with none of these bits is never privileged: the walk's common case, decided
from its mode alone."""


class _Open:
    """An open folder, kept open while subfolders of it wait to be opened."""

    def __init__(self, descriptor: int, owned: bool = True) -> None:
        self.descriptor = descriptor
        self.holds = 1
        self.owned = owned

    def release(self) -> None:
        self.holds -= 1
        if self.holds == 0 and self.owned:
            os.close(self.descriptor)


LINK_HOPS = 40
"""The links the kernel follows on one path before it gives up (ELOOP), and so every program."""
LINK_STEPS = 4096
"""The path components one link's judgment follows at most: the VM picks how long its targets are
(`a/../a/../...`), and a walk must not take minutes on its links."""
WALK_LINK_STEPS = 2_000_000
"""The path components the judgments of one walk follow at most, all links together (a few
seconds; a pnpm store of 100,000 links takes about 600,000): past them the walk fails, and the
watch with it (the VM stops)."""
_FOLLOWER_DEPENDENT = "/proc"
"""Where a link's meaning depends on the process that follows it (`/proc/self/cwd`, and `/dev/fd`,
itself a link there): the guard cannot tell where it leads for the user's programs, so it counts as
leading apart."""


class _LinkJudge:
    """Whether a link below the checkout leads into one of the folders kept apart from it."""

    def __init__(self, real_root: str, apart: Sequence[str]) -> None:
        self.real_root = real_root
        self.apart = apart
        self.steps_left = WALK_LINK_STEPS

    def leads_apart(self, path: str) -> bool:
        """`path`: a link below the checkout, reached through real folders (the walk follows none).
        Past the walk's budget of steps, `OverBudget`: many links made slow to follow would
        otherwise hold the walk, and the watch, for as long as the VM likes."""
        reached, steps = _resolved(self.real_root, path)
        self.steps_left -= steps
        if self.steps_left < 0:
            raise OverBudget(f"more than {WALK_LINK_STEPS} steps to follow the links below the checkout "
                             f"(the last: {path})")
        return reached is None or any(reached == folder or reached.startswith(folder + "/") for folder in self.apart)


def _resolved(folder: str, path: str) -> tuple[str | None, int]:
    """`path` from the real folder `folder`, every link on it followed as the kernel follows them,
    in a loop (the VM picks how long a chain is); what does not exist is taken as written. None
    for a path through `/proc`, whose meaning depends on who follows it, and for one longer to
    follow than `LINK_STEPS`; a chain longer than `LINK_HOPS` ends at the link where every program
    stops. Also how many steps it took."""
    pending = [part for part in reversed(path.split("/")) if part]
    reached, hops, steps = folder, 0, 0
    while pending:
        steps += 1
        if steps > LINK_STEPS:
            return None, steps  # no path of the user's takes this long to follow: judged as leading apart
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            reached = os.path.dirname(reached)
            continue
        here = os.path.join(reached, part)
        if here == _FOLLOWER_DEPENDENT:
            return None, steps
        try:
            target = os.readlink(here)
        except OSError:  # no link (or nothing) there: the path goes on from it as written
            reached = here
            continue
        hops += 1
        if hops > LINK_HOPS:
            return here, steps
        if target.startswith("/"):
            reached = "/"
        pending.extend(part for part in reversed(target.split("/")) if part)
    return reached, steps


def _walk_tree(root: int, walk: Walk, host_git: bool, links: _LinkJudge) -> None:
    """Depth first with a list rather than recursion: the VM picks the depth. Open folders are
    those on the way down, each kept until its last subfolder is opened."""
    waiting: list[tuple[_Open, str, str, bool]] = []
    _walk_folder(_Open(root, owned=False), "", walk, host_git, True, waiting, links)
    while waiting:
        parent, name, path, looking_for_git = waiting.pop()
        try:
            opened = _open_subfolder(parent.descriptor, name, path, walk)
        finally:
            parent.release()
        if opened is not None:
            _walk_folder(_Open(opened), path, walk, host_git, looking_for_git, waiting, links)


def _walk_folder(folder: _Open, path: str, walk: Walk, host_git: bool, looking_for_git: bool,
                 waiting: list[tuple[_Open, str, str, bool]], links: _LinkJudge) -> None:
    try:
        with os.scandir(folder.descriptor) as listing:
            entries = list(listing)
    except OSError as error:
        walk.unwalked.append(f"{path or '.'}: {error.strerror or error}")
        folder.release()
        return
    names = {entry.name for entry in entries}
    if looking_for_git and path and (names >= _GIT_DIR_SHAPE or names >= _LINKED_GIT_DIR_SHAPE):
        walk.git_dirs.append(path)
        looking_for_git = False
    prefix = f"{path}/" if path else ""
    for entry in entries:
        name = entry.name
        if looking_for_git and path and name in GUARDED_BELOW:
            walk.guarded_below.extend(prefix + guarded for guarded in GUARDED_BELOW[name])
        inner_looking = looking_for_git
        if looking_for_git and name == ".git":
            inner_looking = False
            if host_git and not path:
                continue
            walk.git_dirs.append(prefix + name)
        if entry.is_dir(follow_symlinks=False):
            folder.holds += 1
            waiting.append((folder, name, prefix + name, inner_looking))
        elif not entry.is_symlink():
            _look_at(folder.descriptor, entry, prefix + name, walk)
        elif looking_for_git and links.leads_apart(prefix + name):
            walk.links_in.append(prefix + name)
    folder.release()


def _open_subfolder(parent: int, name: str, path: str, walk: Walk) -> int | None:
    """The folder, opened; one of the host user's that the VM made unreadable is made readable to
    them first. One that stays closed is noted in `walk.unwalked`: what is in it cannot be judged."""
    try:
        return _searchable(os.open(name, DIRECTORY, dir_fd=parent), path, walk)
    except FileNotFoundError:
        return None
    except PermissionError:
        pass
    except OSError as error:
        if error.errno not in (errno.ENOTDIR, errno.ELOOP):  # replaced by a file or a link meanwhile
            walk.unwalked.append(f"{path}: {error.strerror or error}")
        return None
    try:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    try:
        found = os.fstat(handle)
        if found.st_uid == os.geteuid():
            os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(found.st_mode) | stat.S_IRWXU)
            return os.open(".", DIRECTORY, dir_fd=handle)
        walk.unwalked.append(f"{path}: a folder of uid {found.st_uid} that you cannot read")
        return None
    except OSError as error:
        walk.unwalked.append(f"{path}: {error.strerror or error}")
        return None
    finally:
        os.close(handle)


def _searchable(folder: int, path: str, walk: Walk) -> int | None:
    """`folder`, made searchable to its owner when it is this user's: a folder that lists its names
    but lets no one reach them would hide what is in it from the walk, and the VM may open it again
    at any time. Another owner's that this user cannot search is noted as not walked."""
    found = os.fstat(folder)
    reach = stat.S_IRUSR | stat.S_IXUSR
    if found.st_uid == os.geteuid():
        if found.st_mode & reach != reach:
            os.fchmod(folder, stat.S_IMODE(found.st_mode) | reach)
        return folder
    if os.access(f"/proc/self/fd/{folder}", os.X_OK):
        return folder
    walk.unwalked.append(f"{path}: a folder of uid {found.st_uid} that you cannot search")
    os.close(folder)
    return None


def _look_at(folder: int, entry: os.DirEntry[str], path: str, walk: Walk) -> None:
    try:
        found = entry.stat(follow_symlinks=False)
    except OSError:
        return
    mode = found.st_mode
    if stat.S_ISREG(mode) and not mode & _NEEDS_A_LOOK:
        return
    capability = read_capability(folder, entry.name) if needs_capability_check(mode) else b""
    privileged = privileged_entry(path, found, capability)
    if privileged is not None:
        walk.privileged.append(privileged)


def privileged_entry(path: str, found: os.stat_result, capability: bytes) -> Privileged | None:
    """What an entry's status and `security.capability` value (b"": none) make it, None when
    nothing privileged."""
    kind = privileged_kind(found.st_mode, capability)
    if kind is None:
        return None
    device = f"{os.major(found.st_rdev)}:{os.minor(found.st_rdev)}" if kind != PRIVILEGED_FILE else ""
    return Privileged(path, kind, found.st_mode & 0o7777, found.st_uid, found.st_ino, found.st_ctime_ns,
                      capability.hex() if kind == PRIVILEGED_FILE else "", device)


def read_capability(folder: int, name: str) -> bytes:
    """The `security.capability` value of `name` in the open `folder`, read without following a
    link; empty when it has none, the file system keeps none, or the system has no such thing."""
    if not hasattr(os, "getxattr"):
        return b""
    try:
        return os.getxattr(f"/proc/self/fd/{folder}/{name}", CAPABILITY_ATTRIBUTE, follow_symlinks=False)
    except OSError:
        return b""  # none (ENODATA), none possible (ENOTSUP), or gone meanwhile
