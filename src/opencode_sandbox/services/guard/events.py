"""What changed below the checkout and the folders mounted writable, from the kernel's file
events (inotify), so the idle reaper looks when something changed rather than walking everything
every few seconds.

Every folder is watched, without following a link (the checkout's own `.git` is not: the VM never
reaches it). A folder that appears is watched at once and counts as changed whole, since the VM
may have filled it before its watch was in place. What the events cannot vouch for is said, never
guessed: an overflowed event queue makes everything count as changed (`Events.everything`), and a
folder past the watch limit leaves the watch incomplete (`complete`, `why_incomplete`), so the
caller goes on walking on a schedule as before.

The events are kept in a bounded set: past `PENDING_LIMIT` distinct paths, everything counts
as changed, and the memory stays the same whatever the VM does.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from opencode_sandbox.core.records import Record

WATCH_LIMIT = 200_000
"""The folders one reaper watches at most (each watch takes about 1 KiB of the kernel's memory)."""
PENDING_LIMIT = 10_000
"""The distinct paths kept between two looks; past it, everything counts as changed."""
_CHANGES = (inotify_flags.CREATE | inotify_flags.DELETE | inotify_flags.MODIFY | inotify_flags.ATTRIB
            | inotify_flags.MOVED_FROM | inotify_flags.MOVED_TO | inotify_flags.CLOSE_WRITE
            | inotify_flags.DELETE_SELF | inotify_flags.MOVE_SELF)
_MASK = _CHANGES | inotify_flags.DONT_FOLLOW | inotify_flags.ONLYDIR | inotify_flags.EXCL_UNLINK
_NEW_FOLDER = inotify_flags.CREATE | inotify_flags.MOVED_TO
_WHOLE = inotify_flags.ISDIR | inotify_flags.ATTRIB | inotify_flags.DELETE_SELF | inotify_flags.MOVE_SELF
"""Changes a look at the named files alone cannot judge: a folder made, moved or removed (a git
directory, a guarded folder below the top, a link in place of a folder), a mode, owner or
capability changed (a privileged entry)."""


class Events(Record):
    paths: frozenset[str] = frozenset()
    """Absolute paths that changed (a folder: it or anything in it)."""
    everything: bool = False
    """The events cannot say what changed (the queue overflowed, or past `PENDING_LIMIT`); after an
    overflow, call `rewatch` before looking."""
    whole: bool = False
    """Among the changes is one that calls for a look at everything (`_WHOLE`)."""


class CheckoutEvents:
    """The kernel's events for the folders below `tops`, read without blocking by `take`."""

    def __init__(self, tops: Sequence[Path], skip: Sequence[Path] = ()) -> None:
        self._inotify = INotify(nonblocking=True)
        self._folders: dict[int, str] = {}
        self._skip = frozenset(str(each) for each in skip)
        self._pending: set[str] = set()
        self._everything = False
        self._whole = False
        self.why_incomplete = ""
        self._tops = [str(top) for top in tops]
        for top in self._tops:
            self._watch_tree(top, new=False)

    def rewatch(self) -> None:
        """Every folder watched again: after an overflowed queue, folders made meanwhile were never
        watched. A folder already watched keeps its watch (and is known by its path now)."""
        self.why_incomplete = ""
        for top in self._tops:
            self._watch_tree(top, new=False)

    @property
    def complete(self) -> bool:
        """Every folder is watched: no change can happen unseen but through a mapped file."""
        return not self.why_incomplete

    @property
    def watched(self) -> int:
        return len(self._folders)

    def fileno(self) -> int:
        return int(self._inotify.fileno())

    def close(self) -> None:
        self._inotify.close()

    def take(self) -> Events | None:
        """What changed since the last take, None when nothing did."""
        try:
            for event in self._inotify.read(timeout=0):
                self._note(event.wd, event.mask, event.name)
        except BlockingIOError:
            pass
        if not self._pending and not self._everything:
            return None
        taken = Events(frozenset(self._pending), self._everything, self._whole or self._everything)
        self._pending, self._everything, self._whole = set(), False, False
        return taken

    def _note(self, wd: int, mask: int, name: str) -> None:
        if mask & inotify_flags.Q_OVERFLOW:
            self._everything = True
            return
        folder = self._folders.get(wd)
        if mask & inotify_flags.IGNORED:
            self._folders.pop(wd, None)
            return
        if folder is None:
            return
        path = f"{folder}/{name}" if name else folder
        if mask & inotify_flags.ISDIR and mask & _NEW_FOLDER:
            self._watch_tree(path, new=True)
        if mask & _WHOLE:
            self._whole = True
        self._add(path)

    def _add(self, path: str) -> None:
        if self._everything:
            return
        self._pending.add(path)
        if len(self._pending) > PENDING_LIMIT:
            self._pending.clear()
            self._everything = True

    def _watch_tree(self, top: str, new: bool = True) -> None:
        """Watch `top` and every folder below it, one by one without recursion (the VM picks the
        depth) and without following a link. In a folder that is `new` (made or moved in while
        watched) everything counts as changed: the VM may have filled it before its watch."""
        waiting = [top]
        while waiting:
            folder = waiting.pop()
            if folder in self._skip:
                continue
            if not self._watch_one(folder):
                return
            try:
                with os.scandir(folder) as listing:
                    for entry in listing:
                        if new:
                            self._add(entry.path)
                        if entry.is_dir(follow_symlinks=False):
                            waiting.append(entry.path)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone, or replaced by a file or a link meanwhile
            except OSError as error:
                self._unwatched(folder, error)

    def _watch_one(self, folder: str) -> bool:
        if len(self._folders) >= WATCH_LIMIT:
            self.why_incomplete = f"more than {WATCH_LIMIT} folders to watch"
            return False
        try:
            wd = int(self._inotify.add_watch(folder, _MASK))
        except OSError as error:
            if error.errno == errno.ENOSPC:
                self.why_incomplete = ("the kernel's limit of watched folders was reached "
                                       "(`sysctl fs.inotify.max_user_watches`)")
                return False
            if error.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                self._unwatched(folder, error)
            return True  # gone, or a link or a file in its place meanwhile: nothing to watch there
        self._folders[wd] = folder  # a folder moved keeps its watch, known by its new path
        return True

    def _unwatched(self, folder: str, error: OSError) -> None:
        """A folder that can be neither watched nor listed (closed to this user, deeper than a path
        may be): what changes there is unseen, so the events no longer vouch for the checkout."""
        if not self.why_incomplete:
            self.why_incomplete = f"a folder cannot be watched ({error.strerror or error}): {folder[:200]!r}"
