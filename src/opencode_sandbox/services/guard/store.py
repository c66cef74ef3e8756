"""The guard's record of one project, in its private state folder: `guard/record.yaml`, with a
copy of each guarded file up to `COPY_LIMIT` under `guard/copies/`, named by its digest."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from opencode_sandbox.core.guard import FILE, Entry, entry_from_mapping
from opencode_sandbox.core.guard_privileged import Privileged, privileged_from_mapping
from opencode_sandbox.core.records import Record
from opencode_sandbox.state.files import (
    FILE_MODE,
    UnreadableState,
    ensure_private_dir,
    read_yaml_mapping,
    write_yaml,
)
from opencode_sandbox.state_layout import GUARD_COPIES, GUARD_LOCK, GUARD_MOVED, GUARD_RECORD, ProjectLayout


class GuardRecord(Record):
    root: str
    paths: tuple[str, ...]
    entries: Mapping[str, Entry]
    """The trusted state: what the user has seen or kept."""
    vm_may_write: bool = False
    """A VM of the project may have run since: changes from `entries` may be the VM's."""
    at_stop: Mapping[str, Entry] | None = None
    """The guarded files as the tool stopped the VM, until the next review."""
    git_entries: tuple[str, ...] = ()
    """The git directories below the checkout when the record was taken (`git_dir_entries`)."""
    links_in: tuple[str, ...] = ()
    """The links into what the tool keeps apart when the record was taken (`Walk.links_in`): the user's."""
    below: tuple[str, ...] = ()
    """The default guarded paths found below the checkout's top when the record was taken
    (`Walk.guarded_below`)."""
    host_git: bool = False
    """The checkout's own `.git` is the host's repository, out of the VM's reach."""
    privileged: tuple[Privileged, ...] = ()
    """The privileged entries below the checkout when the record was taken: the user's own."""
    mounts: tuple[str, ...] = ()
    """The host folders mounted writable into the VM (`guard_mounts.writable_folders`)."""
    mount_privileged: tuple[Privileged, ...] = ()
    """The privileged entries in `mounts` when the record was taken, by absolute path: the user's own."""


class GuardStore:
    """The record of one project, in its private state folder."""

    def __init__(self, project_dir: Path) -> None:
        project = ProjectLayout(project_dir)
        self.folder = project.guard
        self.record_path = project[GUARD_RECORD]
        self.copies = project[GUARD_COPIES]
        self.moved_path = project[GUARD_MOVED]
        self.review = project.guard_review
        """Where what the guard takes from the checkout is kept for the user, each time in a new
        folder named by the time (`guard_moves.new_review_folder`): out of the VM's reach."""
        self._lock_path = project[GUARD_LOCK]

    @property
    def kept_apart(self) -> tuple[Path, ...]:
        """What of the project's lies apart from the checkout and must not be reached from it: its
        private state folder, which holds the VM's git directory and the review folder
        (`Walk.links_in`)."""
        return (self.folder.parent,)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        import fcntl

        ensure_private_dir(self.folder)
        descriptor = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def load(self) -> GuardRecord | None:
        try:
            data = read_yaml_mapping(self.record_path)
            if data is None:
                return None
            at_stop = data.get("at_stop")
            return GuardRecord(
                root=str(data["root"]),
                paths=tuple(str(path) for path in data["paths"]),
                entries=_entries(data["entries"]),
                vm_may_write=bool(data.get("vm_may_write")),
                at_stop=_entries(at_stop) if at_stop is not None else None,
                git_entries=tuple(str(path) for path in data.get("git_entries", ())),
                links_in=tuple(str(path) for path in data.get("links_in") or ()),
                below=tuple(str(path) for path in data.get("below") or ()),
                host_git=bool(data.get("host_git")),
                privileged=tuple(privileged_from_mapping(each) for each in data.get("privileged") or ()),
                mounts=tuple(str(folder) for folder in data.get("mounts") or ()),
                mount_privileged=tuple(privileged_from_mapping(each) for each in data.get("mount_privileged") or ()),
            )
        except (UnreadableState, KeyError, TypeError, ValueError, AttributeError):
            return None  # recorded afresh: nothing to compare with

    def save(self, record: GuardRecord, contents: Mapping[str, bytes]) -> None:
        copies = self.copies
        ensure_private_dir(copies)
        wanted = {entry.digest for entry in record.entries.values() if entry.kind == FILE}
        for path, entry in record.entries.items():
            copy = copies / entry.digest
            if entry.kind == FILE and path in contents and not copy.exists():
                descriptor = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(contents[path])
        write_yaml(self.record_path, {
            "root": record.root,
            "paths": list(record.paths),
            "entries": {path: entry.as_mapping() for path, entry in record.entries.items()},
            "vm_may_write": record.vm_may_write,
            "at_stop": None if record.at_stop is None else {
                path: entry.as_mapping() for path, entry in record.at_stop.items()},
            "git_entries": list(record.git_entries),
            "links_in": list(record.links_in),
            "below": list(record.below),
            "host_git": record.host_git,
            "privileged": [each.as_mapping() for each in record.privileged],
            "mounts": list(record.mounts),
            "mount_privileged": [each.as_mapping() for each in record.mount_privileged],
        })
        for copy in copies.iterdir():
            if copy.name not in wanted:
                copy.unlink(missing_ok=True)

    def copy_of(self, entry: Entry) -> bytes | None:
        try:
            return (self.copies / entry.digest).read_bytes()
        except FileNotFoundError:
            return None


def _entries(data: object) -> dict[str, Entry]:
    if not isinstance(data, dict):
        raise ValueError("not a mapping of entries")
    return {str(path): entry_from_mapping(value) for path, value in data.items()}


def watched(record: GuardRecord, walked_below: Iterable[str]) -> tuple[str, ...]:
    """What the record guards in the checkout (the user's links into what is set aside by their
    targets too), with the guarded paths a walk found below the top now (`walked_below`): one the VM
    added is compared as well as one it removed."""
    return tuple(dict.fromkeys((*record.paths, *record.git_entries, *record.links_in, *record.below,
                                *walked_below)))


def covered(entries: Mapping[str, Entry], paths: Iterable[str]) -> dict[str, Entry]:
    """The entries under `paths`, and those recorded in place of one (a link or file on the way)."""
    guarded = list(paths)
    return {
        path: entry for path, entry in entries.items()
        if any(path == each or path.startswith(each + "/") or each.startswith(path + "/") for each in guarded)
    }
