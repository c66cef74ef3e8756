"""The guarded files in the checkout: read them, put a recorded version back, move one aside.

Every path is walked one component at a time from an open descriptor of the checkout, never
following a symlink (`O_NOFOLLOW`, `dir_fd`): a guarded path that is a link, or lies under one,
is recorded as the link itself, and a restore replaces a link in its way instead of writing
through it, so nothing here reads or writes outside the checkout but the review folder, in the
project's private state folder, where what is moved aside is kept (`move_aside`).
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
    GUARDED_BELOW,
    LINK,
    OLD_REVIEW_FOLDER,
    READ_BUDGET,
    SPARSE_FROM,
    Entry,
)
from opencode_sandbox.core.guard_privileged import (
    CAPABILITY_ATTRIBUTE,
    Privileged,
    needs_capability_check,
    privileged_kind,
)
from opencode_sandbox.core.guard_privileged import FILE as PRIVILEGED_FILE
from opencode_sandbox.core.records import Record
from opencode_sandbox.state.files import ensure_private_dir

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_A_FOLDER = (errno.ELOOP, errno.ENOTDIR)
STRIP_DEPTH_LIMIT = 256
"""How deep into a folder moved aside its files lose their execute bits: the VM picks the depth."""
DESCRIPTORS_WANTED = 1 << 16
"""The walk and the snapshot hold a descriptor for each level of the folder they look into, and the
VM picks the depth: the process may open this many (up to its hard limit) rather than a login's
usual 1024. A folder that still cannot be opened is named as not walked."""


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
    _allow_descriptors()
    snapshot = Snapshot()
    root_fd = os.open(root, _DIRECTORY)
    try:
        for path in guarded:
            _record_path(root_fd, path, snapshot)
    finally:
        os.close(root_fd)
    return snapshot


def _allow_descriptors() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = DESCRIPTORS_WANTED if hard == resource.RLIM_INFINITY else min(hard, DESCRIPTORS_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


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
                opened = os.open(part, _DIRECTORY, dir_fd=folder)
            except (FileNotFoundError, PermissionError):
                yield None, ""
                return
            except OSError as error:
                if error.errno not in _NOT_A_FOLDER:
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
        first = os.open(name, _DIRECTORY, dir_fd=parent)
    except PermissionError:
        return
    # A stack rather than recursion: the VM picks the depth. Each level's folder is open while its
    # entries are looked at.
    names = _listing(first)
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
                inner = os.open(item, _DIRECTORY, dir_fd=level.descriptor)
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.EACCES, errno.EMFILE, *_NOT_A_FOLDER):
                    continue  # gone, closed to this user, or past every descriptor it may open: the walk says so
                raise
            names = _listing(inner)
            seen += len(names)
            stack.append(_Level(inner, child, names, snapshot))
    finally:
        for level in stack:
            os.close(level.descriptor)


def _listing(folder: int) -> list[str]:
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
    root_fd = os.open(root, _DIRECTORY)
    try:
        folder = _make_folders(root_fd, parts[:-1]) if entry is not None else _open_folders(root_fd, parts[:-1])
        if folder is None:
            return
        try:
            _put(folder, parts[-1], entry, content)
        finally:
            if folder != root_fd:
                os.close(folder)
    finally:
        os.close(root_fd)


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
    _allow_descriptors()
    parts = path.split("/")
    root_fd = os.open(root, _DIRECTORY)
    source: int | None = None
    opened: set[int] = set()
    try:
        source = _open_folders(root_fd, parts[:-1])
        if source is None:
            return None
        opened.add(source)
        try:
            found = os.stat(parts[-1], dir_fd=source, follow_symlinks=False)
        except FileNotFoundError:
            return None
        review_fd = os.open(review, _DIRECTORY)
        opened.add(review_fd)
        target = _make_folders(review_fd, parts[:-1])
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
        _remove(target, name)
    else:
        _copied.left -= allowed - budget.left
    try:
        _remove(source, name)
    except OSError:
        if not not_kept:
            _remove(target, name)
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
    opened = os.open(name, _DIRECTORY, dir_fd=source)
    made = -1
    try:
        os.mkdir(name, 0o700, dir_fd=target)
        made = os.open(name, _DIRECTORY, dir_fd=target)
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


@contextlib.contextmanager
def opened_folder(root: Path, parts: Sequence[str]) -> Iterator[int | None]:
    """The folder at `parts` below the checkout, open while in the block; None when one is
    missing or no folder."""
    root_fd = os.open(root, _DIRECTORY)
    folder: int | None = None
    try:
        folder = _open_folders(root_fd, parts)
        yield folder
    finally:
        if folder is not None and folder != root_fd:
            os.close(folder)
        os.close(root_fd)


def _open_folders(root_fd: int, parts: Sequence[str]) -> int | None:
    """The folder at `parts`, opened; None when one is missing or no folder (nothing beneath)."""
    folder = root_fd
    for part in parts:
        try:
            opened = os.open(part, _DIRECTORY, dir_fd=folder)
        except OSError as error:
            if error.errno not in (errno.ENOENT, *_NOT_A_FOLDER):
                raise
            opened = -1
        if folder != root_fd:
            os.close(folder)
        if opened < 0:
            return None
        folder = opened
    return folder


def _make_folders(root_fd: int, parts: Sequence[str]) -> int:
    """The folder at `parts`, made where missing; a link or file in the way is removed first."""
    folder = root_fd
    for part in parts:
        try:
            opened = os.open(part, _DIRECTORY, dir_fd=folder)
        except OSError as error:
            if error.errno not in (errno.ENOENT, *_NOT_A_FOLDER):
                raise
            if error.errno != errno.ENOENT:
                os.unlink(part, dir_fd=folder)
            os.mkdir(part, 0o755, dir_fd=folder)
            opened = os.open(part, _DIRECTORY, dir_fd=folder)
        if folder != root_fd:
            os.close(folder)
        folder = opened
    return folder


def _put(folder: int, name: str, entry: Entry | None, content: bytes | None) -> None:
    if entry is None:
        _remove(folder, name)
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
            _remove(folder, name)
    os.rename(staging, name, src_dir_fd=folder, dst_dir_fd=folder)


def _remove(folder: int, name: str) -> None:
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
                    if error.errno not in _NOT_A_FOLDER:
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
    opened = os.open(name, _DIRECTORY, dir_fd=parent)
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
                _put(folder, name, Entry(FILE, found.st_mode & 0o666), source.read())
        finally:
            os.close(descriptor)
    elif stat.S_ISDIR(found.st_mode) and depth < STRIP_DEPTH_LIMIT:
        try:
            inner = os.open(name, _DIRECTORY, dir_fd=folder)
        except PermissionError:
            return
        try:
            for item in _listing(inner):
                _without_execute_bits(inner, item, depth + 1)
        finally:
            os.close(inner)


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
    _allow_descriptors()
    walk = Walk()
    real_root = os.path.realpath(root)
    # the old folder as it lies in the checkout: a link the VM puts there leads nowhere it set apart
    apart = (os.path.join(real_root, OLD_REVIEW_FOLDER), *(os.path.realpath(folder) for folder in kept_apart))
    root_fd = os.open(root, _DIRECTORY)
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
        return _searchable(os.open(name, _DIRECTORY, dir_fd=parent), path, walk)
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
            return os.open(".", _DIRECTORY, dir_fd=handle)
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
