"""The guard on files the host runs: recorded at every start of the project VM, reviewed at the
next `run`, `shell`, detach and `stop`, shown by `guard status`.

The record lives in the project's private state folder (`guard/record.yaml`, with a copy of each
guarded file up to `COPY_LIMIT` under `guard/copies/`, named by its digest). It says whether a VM
may have written the checkout since it was taken: only then are changes counted as the VM's.
When the tool stops the VM (the idle reaper, `stop`, `kill`), the files are read again at once
(`note_vm_stopped`), so what the user changes on the host afterwards is told apart and kept.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard import (
    DEFAULT_GUARDED,
    FILE,
    REVIEW_FOLDER,
    Change,
    Entry,
    changes,
    diff_lines,
    entry_from_mapping,
    shown,
    vm_changes,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.services import guard_files
from opencode_sandbox.state.files import (
    FILE_MODE,
    UnreadableState,
    ensure_private_dir,
    read_yaml_mapping,
    write_yaml,
)

if TYPE_CHECKING:
    from opencode_sandbox.app import App
    from opencode_sandbox.config.settings import Settings
    from opencode_sandbox.ui.console import Console

GUARD_DIR = "guard"
RECORD_FILE = "record.yaml"
COPIES_DIR = "copies"
LOCK_FILE = "guard.lock"


class GuardRecord(Record):
    root: str
    paths: tuple[str, ...]
    entries: Mapping[str, Entry]
    """The trusted state: what the user has seen or kept."""
    vm_may_write: bool = False
    """A VM of the project may have run since: changes from `entries` may be the VM's."""
    at_stop: Mapping[str, Entry] | None = None
    """The guarded files as the tool stopped the VM, until the next review."""
    read_only: tuple[str, ...] = ()
    """Guarded paths the VM that ran sees read-only: what changed beneath them was changed on
    the host. Empty until a start knows the VM's mounts."""


class Review(Record):
    by_vm: tuple[Change, ...] = ()
    reverted: bool = False
    review_folder: str = ""

    @property
    def touched_tool_folder(self) -> bool:
        """A reverted change to `.opencode-sandbox/`, whose configuration was read before."""
        return self.reverted and any(change.path.startswith(".opencode-sandbox") for change in self.by_vm)


class GuardStatus(Record):
    recorded: bool
    paths: tuple[str, ...]
    vm_may_write: bool = False
    by_vm: tuple[Change, ...] = ()
    on_host: tuple[Change, ...] = ()
    """Changes made on the host (while no VM ran, or beneath a path the VM sees read-only): the
    user's, recorded at the next start."""


def guarded_paths(settings: Settings) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*DEFAULT_GUARDED, *settings.guarded_paths)))


class GuardStore:
    """The record of one project, in its private state folder."""

    def __init__(self, project_dir: Path) -> None:
        self.folder = project_dir / GUARD_DIR

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        import fcntl

        ensure_private_dir(self.folder)
        descriptor = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def load(self) -> GuardRecord | None:
        try:
            data = read_yaml_mapping(self.folder / RECORD_FILE)
            if data is None:
                return None
            at_stop = data.get("at_stop")
            return GuardRecord(
                root=str(data["root"]),
                paths=tuple(str(path) for path in data["paths"]),
                entries=_entries(data["entries"]),
                vm_may_write=bool(data.get("vm_may_write")),
                at_stop=_entries(at_stop) if at_stop is not None else None,
                read_only=tuple(str(path) for path in data.get("read_only", ())),
            )
        except (UnreadableState, KeyError, TypeError, ValueError, AttributeError):
            return None  # recorded afresh: nothing to compare with

    def save(self, record: GuardRecord, contents: Mapping[str, bytes]) -> None:
        copies = self.folder / COPIES_DIR
        ensure_private_dir(copies)
        wanted = {entry.digest for entry in record.entries.values() if entry.kind == FILE}
        for path, entry in record.entries.items():
            copy = copies / entry.digest
            if entry.kind == FILE and path in contents and not copy.exists():
                descriptor = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(contents[path])
        write_yaml(self.folder / RECORD_FILE, {
            "root": record.root,
            "paths": list(record.paths),
            "entries": {path: entry.as_mapping() for path, entry in record.entries.items()},
            "vm_may_write": record.vm_may_write,
            "at_stop": None if record.at_stop is None else {
                path: entry.as_mapping() for path, entry in record.at_stop.items()},
            "read_only": list(record.read_only),
        })
        for copy in copies.iterdir():
            if copy.name not in wanted:
                copy.unlink(missing_ok=True)

    def copy_of(self, entry: Entry) -> bytes | None:
        try:
            return (self.folder / COPIES_DIR / entry.digest).read_bytes()
        except FileNotFoundError:
            return None


def _entries(data: object) -> dict[str, Entry]:
    if not isinstance(data, dict):
        raise ValueError("not a mapping of entries")
    return {str(path): entry_from_mapping(value) for path, value in data.items()}


def _covered(entries: Mapping[str, Entry], paths: Iterable[str]) -> dict[str, Entry]:
    """The entries under `paths`, and those recorded in place of one (a link or file on the way)."""
    guarded = list(paths)
    return {
        path: entry for path, entry in entries.items()
        if any(path == each or path.startswith(each + "/") or each.startswith(path + "/") for each in guarded)
    }


def ask_on_the_terminal(question: str) -> bool:
    from opencode_sandbox.ui.prompts import confirm

    return confirm(question, default=True, interactive=True)


def review(app: App, *, vm_may_write_after: bool, keep_read_only: bool = False,
           ask: Callable[[str], bool] | None = None) -> Review:
    """Compare the guarded files with the record, show what the VM changed, keep or revert it
    (asked on a terminal; reverted without one), and record the result. `keep_read_only`: the
    same VM runs on (a detach)."""
    store = GuardStore(app.state.project_dir(app.project.slug))
    paths = guarded_paths(app.settings)
    root = app.project.root
    with store.lock():
        record = store.load()
        now = guard_files.take_snapshot(root, paths)
        outcome = Review()
        if record is not None and record.root == str(root) and (record.vm_may_write or record.at_stop is not None):
            common = set(record.paths) & set(paths)
            by_vm, later = vm_changes(
                _covered(record.entries, common),
                None if record.at_stop is None else _covered(record.at_stop, common),
                _covered(now.entries, common),
            )
            by_vm = [change for change in by_vm if not _beneath(change.path, record.read_only)]
            if later:
                app.console.warn("changed on the host after the VM stopped, kept as they are: "
                                 + ", ".join(shown(change.path) for change in later))
            if by_vm:
                outcome = _decide(app, store, now, by_vm, ask or ask_on_the_terminal)
        # At a start the VM's mounts are not known yet (`note_read_only` says them); at a
        # detach they stay those of the running VM.
        read_only = record.read_only if record is not None and keep_read_only else ()
        recorded = GuardRecord(str(root), paths, now.entries, vm_may_write_after, None, read_only)
        if recorded != record:  # a warm start whose files did not change writes nothing
            store.save(recorded, now.contents)
    return outcome


def _decide(app: App, store: GuardStore, now: guard_files.Snapshot, by_vm: Sequence[Change],
            ask: Callable[[str], bool]) -> Review:
    console = app.console
    console.warn(f"{len(by_vm)} file(s) the host runs changed while the VM ran:")
    for change in by_vm:
        show_change(console, store, now, change)
    question = f"Revert them? The VM's versions are kept under {REVIEW_FOLDER}/"
    if app.interactive:
        try:
            revert = ask(question)
        except Exception:  # a terminal gone while asking (a closed window at detach): the safe answer
            revert = True
    else:
        console.warn("--yes: reverting them" if app.assume_yes else "no terminal to ask on: reverting them")
        revert = True
    if not revert:
        console.info("Kept the VM's versions; they are recorded as the current state.")
        return Review(tuple(by_vm))
    folder = _revert(app.project.root, store, now, by_vm, console)
    console.warn(f"reverted {len(by_vm)} change(s); the VM's versions are kept in {folder}")
    return Review(tuple(by_vm), True, folder)


def _revert(root: Path, store: GuardStore, now: guard_files.Snapshot, by_vm: Sequence[Change],
            console: Console) -> str:
    from datetime import UTC, datetime

    folder = guard_files.new_review_folder(root, REVIEW_FOLDER, datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    for change in by_vm:
        before = change.before
        content = store.copy_of(before) if before is not None and before.kind == FILE else None
        try:
            if change.after is not None:
                guard_files.move_aside(root, change.path, folder)
            if before is not None and before.kind == FILE and content is None:
                console.warn(f"{shown(change.path)}: its earlier version was not kept (over 1 MiB, or the record was "
                             f"lost); the VM's version is moved to {folder}",
                             hint="restore it from version control or a backup")
                now.entries.pop(change.path, None)
                continue
            guard_files.restore(root, change.path, before, content)
        except OSError as error:
            console.warn(f"cannot revert {shown(change.path)}: {error.strerror or error}",
                         hint=f"put it back by hand (the VM's version may be in {folder}); "
                              "it is reported again until it matches the record")
        if before is None:
            now.entries.pop(change.path, None)
            now.contents.pop(change.path, None)
        else:  # what the record holds, reported again next time if the revert failed
            now.entries[change.path] = before
            if content is not None:
                now.contents[change.path] = content
    return folder


def show_change(console: Console, store: GuardStore, now: guard_files.Snapshot, change: Change) -> None:
    console.note(f"  {change.headline()}")
    before = store.copy_of(change.before) if change.before is not None and change.before.kind == FILE else None
    after = now.contents.get(change.path) if change.after is not None else None
    if change.what == "mode changed":
        return
    for line in diff_lines(change, before, after):
        console.note(f"    {line}")


def _beneath(path: str, folders: Iterable[str]) -> bool:
    return any(path == folder or path.startswith(folder + "/") for folder in folders)


def note_read_only(app: App, paths: Sequence[str]) -> None:
    """The VM now running sees `paths` read-only (none where its mounts may differ)."""
    store = GuardStore(app.state.project_dir(app.project.slug))
    with store.lock():
        record = store.load()
        if record is not None and record.read_only != tuple(paths):
            store.save(record._replace(read_only=tuple(paths)), {})


def note_vm_stopped(state_root: Path, slug: str) -> None:
    """The tool stopped the VM: what the guarded files hold now is where the VM left them."""
    store = GuardStore(state_root / slug)
    with store.lock():
        record = store.load()
        if record is None or not record.vm_may_write or not Path(record.root).is_dir():
            return
        now = guard_files.take_snapshot(Path(record.root), record.paths)
        store.save(record._replace(vm_may_write=False, at_stop=now.entries), {})


def status(app: App) -> GuardStatus:
    store = GuardStore(app.state.project_dir(app.project.slug))
    paths = guarded_paths(app.settings)
    record = store.load()
    if record is None or record.root != str(app.project.root):
        return GuardStatus(False, paths)
    now = guard_files.take_snapshot(app.project.root, paths)
    common = set(record.paths) & set(paths)
    baseline, current = _covered(record.entries, common), _covered(now.entries, common)
    if not record.vm_may_write and record.at_stop is None:
        return GuardStatus(True, paths, False, (), tuple(changes(baseline, current)))
    at_stop = None if record.at_stop is None else _covered(record.at_stop, common)
    by_vm, later = vm_changes(baseline, at_stop, current)
    on_host = [change for change in by_vm if _beneath(change.path, record.read_only)]
    by_vm = [change for change in by_vm if not _beneath(change.path, record.read_only)]
    return GuardStatus(True, paths, record.vm_may_write, tuple(by_vm), (*later, *on_host))


def render_status(found: GuardStatus, output_format: str) -> str:
    if output_format == "json":
        import json

        return json.dumps({
            "recorded": found.recorded,
            "state": "changed" if found.by_vm else "clean",
            "vm_may_write": found.vm_may_write,
            "guarded": list(found.paths),
            "changed": [change.as_mapping() for change in found.by_vm],
            "changed_on_host": [change.as_mapping() for change in found.on_host],
        }, indent=2)
    lines = [f"guarded: {', '.join(found.paths)}"]
    if not found.recorded:
        return "\n".join([*lines, "state: not recorded yet (the next run, shell or serve records it)"])
    if not found.by_vm:
        lines.append("state: clean")
    else:
        lines.append("state: changed while a VM ran (the next run, shell, detach or stop asks to keep or revert):")
        lines += [f"  {change.headline()}" for change in found.by_vm]
    if found.on_host:
        lines.append("changed on the host (yours, kept; recorded as they are at the next start):")
        lines += [f"  {change.headline()}" for change in found.on_host]
    return "\n".join(lines)


def read_only_paths(root: Path, paths: Sequence[str]) -> list[str]:
    """The guarded paths a runtime can present read-only: those that exist now as a real file or
    folder, reached without a symlink (a bind mount would follow one out of the checkout); in a
    worktree, the `.git` file that points at the repository."""
    found: list[str] = []
    for path in paths:
        parts = path.split("/")
        for index in range(1, len(parts) + 1):
            here = "/".join(parts[:index])
            try:
                mode = os.lstat(root / here).st_mode
            except OSError:
                break
            if stat.S_ISLNK(mode):
                break
            if stat.S_ISREG(mode) or (index == len(parts) and stat.S_ISDIR(mode)):
                found.append(here)
                break
    return list(dict.fromkeys(found))
