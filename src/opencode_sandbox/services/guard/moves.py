"""Moving what the VM changed out of the host's way: while it runs (`catch_while_running`, every
few seconds from the idle reaper) and when a review reverts.

What is moved goes into a new folder of the review folder, in the project's private state folder
(`GuardStore.review`), out of the VM's reach; a privileged entry the VM made
(`core.guard_privileged`) loses its privileges where it is. Each is noted in the
project's private `guard/moved.yaml` until the next review tells it (`read_notes`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from opencode_sandbox.core.guard import (
    CROWDED,
    FILE,
    FOLDER_ENTRY_LIMIT,
    Change,
    changes,
    diff_lines,
    guarded_root,
    shown,
)
from opencode_sandbox.core.guard_privileged import Caught, Privileged, caught_from_mapping
from opencode_sandbox.core.records import Record
from opencode_sandbox.services.guard import aside as guard_aside
from opencode_sandbox.services.guard import files as guard_files
from opencode_sandbox.services.guard import mounts as guard_mounts
from opencode_sandbox.services.guard import privileged as guard_privileged
from opencode_sandbox.services.guard import walk as guard_walk
from opencode_sandbox.services.guard.store import GuardRecord, GuardStore, covered, watched
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import StateLayout

Warn = Callable[[str, str], None]
"""A message and what to do about it."""


class Held(Record):
    """A guarded file the VM changed while it ran, put back as it was within seconds."""

    change: str
    """The change's headline (`Change.headline`), escaped."""
    kept: str
    """Where the VM's version is now, an absolute path in the review folder ("" when there was none,
    or none could be kept; notes of older versions: relative to the checkout)."""
    diff: tuple[str, ...] = ()
    not_kept: str = ""
    """Why the VM's version was removed without a copy (`guard_aside.Aside.not_kept`), when so."""

    def line(self) -> str:
        if self.not_kept:
            return f"{self.change}, the VM's version removed (not kept: {self.not_kept})"
        return self.change + (f", the VM's version now in {self.kept}" if self.kept else "")


NOTES_KEPT = 200
"""What the notes list of each kind at most; past that they only count (`Notes.unlisted`), so the
VM cannot grow them, nor the next start's message, without end."""
HELD_PER_FOLDER = 5
"""The files put back that the notes list for one folder; the rest of that folder's only count, so
a flood in one folder never hides a change elsewhere."""
LOGGED_PER_ROUND = 20


class Notes(Record):
    moved: tuple[str, ...] = ()
    """Git directories moved aside: `path -> where` (`guard_aside.Aside.where`)."""
    held: tuple[Held, ...] = ()
    privileged: tuple[Caught, ...] = ()
    """Privileged entries the VM made, and what was done about each."""
    unlisted: int = 0
    """More of them, past `NOTES_KEPT`, done the same way but not listed."""
    unlisted_in: tuple[tuple[str, int], ...] = ()
    """Files put back past `HELD_PER_FOLDER` in one folder: the folder and how many."""
    left_for_review: int = 0
    """What this look could not settle and leaves to the next review (not kept in the notes): a
    changed file whose earlier version was not kept, a folder it could not look into."""


def catch_while_running(state_root: Path, slug: str, log: Callable[[str], None]) -> Notes:
    """While the VM runs, before the host's git, a shell hook, an editor or a user reads or runs
    them: every privileged entry that appeared below the checkout since the record is
    neutralised, every git directory that appeared (a nested repository, a `.git` file, a bare
    repository's shape) is moved into the review folder whole, and every guarded file the VM
    changed is put back as recorded, the VM's version kept beside the moved ones. Each is told
    at the next review. What was done."""
    store = GuardStore(StateLayout(state_root).project(slug).folder)
    with store.lock():
        record = store.load()
        if record is None or not record.vm_may_write or not Path(record.root).is_dir():
            return Notes()
        walked = guard_walk.walk_checkout(Path(record.root), record.host_git, store.kept_apart)
        for folder in walked.unwalked:
            log(f"cannot look inside {shown(folder)}: a privileged file there would not be caught")
        caught, moved = catch_new(store, record, walked, log)
        held, left = _hold_changed_files(store, record, walked, log)
        unresolved = sum(1 for each in caught if each.failed)
        return Notes(tuple(moved), tuple(held), tuple(caught),
                     left_for_review=left + len(walked.unwalked) + unresolved)


_GIT_MARKS = frozenset((".git", "HEAD", "objects", "refs", "commondir"))
"""Names that can make a folder a git directory (`guard_walk.walk_checkout`)."""


def catch_named(state_root: Path, slug: str, changed: Iterable[str], log: Callable[[str], None]
                ) -> tuple[Notes, bool]:
    """`catch_while_running` for the files the kernel's events named (absolute paths), with no walk
    of the checkout: each guarded file among them is put back as recorded. Also whether one of
    them calls for a look at everything, which this look leaves out: a link, a folder, anything but
    a plain file of the host user's modes with one name, a path through a name that can make a
    git directory, a path in a folder mounted writable."""
    store = GuardStore(StateLayout(state_root).project(slug).folder)
    with store.lock():
        record = store.load()
        if record is None or not record.vm_may_write:
            return Notes(), False
        root = Path(record.root)
        below: set[str] = set()
        any_guarded = whole = False
        for absolute in changed:
            relative = os.path.relpath(absolute, root)
            if relative == "." or relative.startswith("../") or _GIT_MARKS.intersection(relative.split("/")):
                whole = True
                continue
            try:
                found: os.stat_result | None = os.lstat(absolute)
            except FileNotFoundError:
                found = None
            except OSError:
                whole = True
                continue
            if found is not None and (not stat.S_ISREG(found.st_mode) or found.st_nlink > 1
                                      or found.st_mode & (stat.S_ISUID | stat.S_ISGID)):
                whole = True
                continue
            guarded = guarded_root(relative, record.paths)
            any_guarded = any_guarded or guarded is not None
            if guarded is not None and guarded not in record.paths:
                below.add(guarded)
        if not any_guarded:
            return Notes(), whole
        walked = guard_walk.Walk()
        walked.guarded_below = sorted(below)
        held, left = _hold_changed_files(store, record, walked, log)
        return Notes(held=tuple(held), left_for_review=left), whole


def catch_new(store: GuardStore, record: GuardRecord, walked: guard_walk.Walk,
              log: Callable[[str], None], mounts_walked: list[Privileged] | None = None
              ) -> tuple[list[Caught], list[str]]:
    """What `walked` found that the record does not hold, made harmless: privileged entries
    first, as a git directory moved aside keeps what is in it, and those of the folders mounted
    writable (`mounts_walked`, or a walk of the record's). `walked` and `mounts_walked` are
    updated to what remains afterwards."""
    caught = neutralise_new_privileged(store, record, walked, log)
    if mounts_walked is None:
        mounts_walked = guard_mounts.walk(record.mounts)
    # only in the folders the VM had: a folder mounted since holds the user's own
    candidates = [each for each in mounts_walked if any(each.path.startswith(folder.rstrip("/") + "/")
                                                        for folder in record.mounts)]
    before = set(candidates)
    in_mounts = guard_mounts.neutralise_new(candidates, record.mount_privileged)
    mounts_walked[:] = [each for each in mounts_walked if each not in before - set(candidates)]
    for each in _note(store, privileged=in_mounts):
        log(each.line())
    return [*caught, *in_mounts], move_new_git_dirs(store, record, walked, log)


def neutralise_new_privileged(store: GuardStore, record: GuardRecord, walked: guard_walk.Walk,
                              log: Callable[[str], None]) -> list[Caught]:
    """Never put back: the user's word is setting a bit again themselves. Noted for the next review;
    one that could not be neutralised stays in `walked` and is tried again at the next round."""
    root, known = Path(record.root), frozenset(record.privileged)
    caught: list[Caught] = []
    for found in [each for each in walked.privileged if each not in known]:
        outcome = guard_privileged.neutralise(root, found, known)
        if outcome is None:
            continue  # gone or replaced meanwhile: the next walk judges what is there
        caught.append(outcome)
        if not outcome.failed:
            walked.privileged.remove(found)
    for each in _note(store, privileged=caught):
        log(each.line())
    return caught


def move_new_git_dirs(store: GuardStore, record: GuardRecord, walked: guard_walk.Walk,
                      log: Callable[[str], None]) -> list[str]:
    """Each git directory whole, so nothing of one stays behind to be read, and each link into what
    is set aside (`Walk.links_in`); noted for the next review."""
    root = Path(record.root)
    new = [(path, walked.git_dirs, "git directory") for path in walked.git_dirs if path not in record.git_entries]
    new += [(path, walked.links_in, "link into what was set aside")
            for path in walked.links_in if path not in record.links_in]
    if not new:
        return []
    folder = new_review_folder(store)
    moved: list[str] = []
    for path, found, what in new:
        try:
            aside = guard_aside.move_aside(root, path, folder)
        except OSError as error:
            log(f"cannot move the VM's {what} {shown(path)} aside: {error}")
            continue
        if aside is not None:
            moved.append(f"{path} -> {aside.where()}")
            found.remove(path)
            if aside.kept:
                log(f"moved the {what} the VM made at {shown(path)} to {shown(aside.kept)}")
            else:
                log(f"removed the {what} the VM made at {shown(path)} (not kept: {aside.not_kept})")
    if moved:
        _note(store, moved=moved)
    return moved


def _hold_changed_files(store: GuardStore, record: GuardRecord, walked: guard_walk.Walk,
                        log: Callable[[str], None]) -> tuple[list[Held], int]:
    """The changes put back, and how many are left to the review."""
    root = Path(record.root)
    paths = watched(record, walked.guarded_below)
    now = guard_files.take_snapshot(root, paths)
    found = changes(covered(record.entries, paths), covered(now.entries, paths))
    # A file whose recorded version was too big to copy cannot be put back: the review says so.
    revertible = [change for change in found if not _needs_missing_copy(store, change)]
    left = len(found) - len(revertible)
    if not revertible:
        return [], left
    folder = new_review_folder(store)
    diffs = [tuple(diff_lines(change, _before(store, change), now.contents.get(change.path))) for change in revertible]
    put_aside = revert(root, store, now, revertible, folder, lambda message, hint: log(f"{message} ({hint})"))
    held = [_held(change, put_aside.get(change.path), diff) for change, diff in zip(revertible, diffs, strict=True)]
    for each in held[:LOGGED_PER_ROUND]:
        where = f"removed (not kept: {each.not_kept})" if each.not_kept else f"in {shown(each.kept or '(none)')}"
        log(f"put back as recorded: {each.change}; the VM's version is {where}")
    if len(held) > LOGGED_PER_ROUND:
        log(f"put back as recorded: {len(held) - LOGGED_PER_ROUND} more, in {shown(str(folder))}")
    _note(store, held=held)
    return held, left


def _needs_missing_copy(store: GuardStore, change: Change) -> bool:
    before = change.before
    return before is not None and (before.kind == CROWDED or (before.kind == FILE and store.copy_of(before) is None))


def _before(store: GuardStore, change: Change) -> bytes | None:
    return store.copy_of(change.before) if change.before is not None and change.before.kind == FILE else None


def _held(change: Change, aside: guard_aside.Aside | None, diff: tuple[str, ...]) -> Held:
    """What is told of a change put back, the VM's version moved aside as `aside` (None: there was none)."""
    if aside is None:
        return Held(change.headline(), "", diff)
    return Held(change.headline(), aside.kept, diff, aside.not_kept)


def new_review_folder(store: GuardStore) -> Path:
    """A new folder of the project's review folder, named by the time (UTC)."""
    from datetime import UTC, datetime

    return guard_aside.new_review_folder(store.review, datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))


def revert(root: Path, store: GuardStore, now: guard_files.Snapshot, by_vm: Sequence[Change], folder: Path,
           warn: Warn) -> dict[str, guard_aside.Aside]:
    """Each change's path back as the record holds it, the VM's version moved into `folder`;
    `now` updated to what the checkout holds afterwards. What became of each VM's version moved,
    by path."""
    put_aside: dict[str, guard_aside.Aside] = {}
    for change in by_vm:
        before = change.before
        content = _before(store, change)
        try:
            if change.after is not None:
                aside = guard_aside.move_aside(root, change.path, folder)
                if aside is not None:
                    put_aside[change.path] = aside
            if before is not None and _needs_missing_copy(store, change):
                aside = put_aside.get(change.path)
                fate = (f"the VM's version is removed (not kept: {aside.not_kept})" if aside and aside.not_kept else
                        f"the VM's version is moved to {shown(aside.kept if aside else str(folder))}")
                warn(f"{shown(change.path)}: its earlier version was not kept (over 1 MiB, a folder of over "
                     f"{FOLDER_ENTRY_LIMIT} entries, or the record was lost); "
                     f"{fate}", "restore it from version control or a backup")
                now.entries.pop(change.path, None)
                continue
            guard_files.restore(root, change.path, before, content)
        except OSError as error:
            warn(f"cannot revert {shown(change.path)}: {error.strerror or error}",
                 f"put it back by hand (the VM's version may be in {shown(str(folder))}); "
                 "it is reported again until it matches the record")
        if before is None:
            now.entries.pop(change.path, None)
            now.contents.pop(change.path, None)
        else:  # what the record holds, reported again next time if the revert failed
            now.entries[change.path] = before
            if content is not None:
                now.contents[change.path] = content
    return put_aside


def read_notes(store: GuardStore) -> Notes:
    try:
        data = read_yaml_mapping(store.moved_path) or {}
    except UnreadableState:
        return Notes()
    moved, held, privileged = data.get("moved"), data.get("held"), data.get("privileged")
    unlisted, unlisted_in = data.get("unlisted"), data.get("unlisted_in")
    return Notes(
        tuple(str(item) for item in moved) if isinstance(moved, list) else (),
        tuple(Held(str(item.get("change", "")), str(item.get("kept", "")),
                   tuple(str(line) for line in item.get("diff") or ()), str(item.get("not_kept") or ""))
              for item in held if isinstance(item, dict)) if isinstance(held, list) else (),
        tuple(_caught(privileged) if isinstance(privileged, list) else ()),
        unlisted if isinstance(unlisted, int) else 0,
        tuple((str(folder), count) for folder, count in unlisted_in.items() if isinstance(count, int))
        if isinstance(unlisted_in, dict) else (),
    )


def _caught(items: list[object]) -> Iterator[Caught]:
    for item in items:
        if isinstance(item, dict):
            with contextlib.suppress(ValueError):
                yield caught_from_mapping(item)


def clear_notes(store: GuardStore, keep: Sequence[Caught] = ()) -> None:
    """The notes told; `keep`: privileged entries still not neutralised, told again next time."""
    (store.moved_path).unlink(missing_ok=True)
    if keep:
        _note(store, privileged=keep)


def _note(store: GuardStore, moved: Sequence[str] = (), held: Sequence[Held] = (),
          privileged: Sequence[Caught] = ()) -> list[Caught]:
    """What is new to the notes of `privileged`: one that could not be neutralised is tried, and
    found again, at every round, and noted once."""
    earlier = read_notes(store)
    fresh = [each for each in dict.fromkeys(privileged) if each not in earlier.privileged]
    if not (moved or held or fresh):
        return []
    all_moved, all_privileged = [*earlier.moved, *moved], [*earlier.privileged, *fresh]
    listed, unlisted_in = _held_by_folder(earlier, held)
    unlisted = earlier.unlisted + sum(max(0, len(each) - NOTES_KEPT) for each in (all_moved, listed, all_privileged))
    write_yaml(store.moved_path, {
        "moved": all_moved[:NOTES_KEPT],
        "held": [{"change": each.change, "kept": each.kept, "diff": list(each.diff), "not_kept": each.not_kept}
                 for each in listed[:NOTES_KEPT]],
        "privileged": [each.as_mapping() for each in all_privileged[:NOTES_KEPT]],
        "unlisted": unlisted,
        "unlisted_in": unlisted_in,
    })
    return fresh


def _held_by_folder(earlier: Notes, held: Sequence[Held]) -> tuple[list[Held], dict[str, int]]:
    """The files put back to list, at most `HELD_PER_FOLDER` a folder, and how many more each
    folder had."""
    listed = list(earlier.held)
    unlisted_in = dict(earlier.unlisted_in)
    per_folder: dict[str, int] = {}
    for each in listed:
        folder = _folder_of(each)
        per_folder[folder] = per_folder.get(folder, 0) + 1
    for each in held:
        folder = _folder_of(each)
        if per_folder.get(folder, 0) >= HELD_PER_FOLDER:
            unlisted_in[folder] = unlisted_in.get(folder, 0) + 1
            continue
        per_folder[folder] = per_folder.get(folder, 0) + 1
        listed.append(each)
    if len(unlisted_in) > NOTES_KEPT:
        unlisted_in = dict(list(unlisted_in.items())[:NOTES_KEPT])
    return listed, unlisted_in


def _folder_of(held: Held) -> str:
    path = held.change.split(": ", 1)[0]
    return path.rsplit("/", 1)[0] if "/" in path else "."
