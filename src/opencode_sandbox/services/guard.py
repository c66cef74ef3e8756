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
    git_entries: tuple[str, ...] = ()
    """The git directories below the checkout when the record was taken (`git_dir_entries`)."""
    host_git: bool = False
    """The checkout's own `.git` is the host's repository, out of the VM's reach."""


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
    """Changes made on the host while no VM ran: the user's, recorded at the next start."""
    moved: tuple[str, ...] = ()
    """Git directories the VM made, moved out of the way while it ran, not yet told at a review."""
    git: tuple[str, ...] = ()
    """How the host's branches and the VM's stand (docs/git.md)."""


def guarded_paths(settings: Settings, root: Path | None = None) -> tuple[str, ...]:
    """The default list, the `guarded-paths` setting, and the host's `core.hooksPath` when it
    lies in the checkout (`root`): the hooks the host's git runs."""
    hooks = _hooks_path_in(root) if root is not None else None
    return tuple(dict.fromkeys((*DEFAULT_GUARDED, *settings.guarded_paths, *([hooks] if hooks else []))))


def _hooks_path_in(root: Path) -> str | None:
    import subprocess

    try:
        done = subprocess.run(["git", "config", "--path", "core.hooksPath"], cwd=root, capture_output=True,
                              text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = done.stdout.strip()
    if done.returncode != 0 or not value:
        return None
    inside = os.path.relpath(os.path.normpath(os.path.join(root, value)), root)
    if inside == "." or inside.startswith("..") or inside == ".git" or inside.startswith(".git/"):
        return None
    return inside


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
                git_entries=tuple(str(path) for path in data.get("git_entries", ())),
                host_git=bool(data.get("host_git")),
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
            "git_entries": list(record.git_entries),
            "host_git": record.host_git,
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


def review(app: App, *, vm_may_write_after: bool, ask: Callable[[str], bool] | None = None) -> Review:
    """Compare the guarded files with the record, show what the VM changed, keep or revert it
    (asked on a terminal; reverted without one), and record the result."""
    store = GuardStore(app.state.project_dir(app.project.slug))
    paths = guarded_paths(app.settings, app.project.root)
    root = app.project.root
    host_git = app.project.is_git
    with store.lock():
        record = store.load()
        if record is not None and record.root == str(root) and record.vm_may_write:
            _move_new_git_dirs(store, record, app.console.verbose)
        _tell_moved(app, store)
        found = guard_files.git_dir_entries(root, host_git)
        earlier = record.git_entries if record is not None and record.root == str(root) else ()
        now = guard_files.take_snapshot(root, (*paths, *found, *earlier))
        outcome = Review()
        if record is not None and record.root == str(root) and (record.vm_may_write or record.at_stop is not None):
            common = (set(record.paths) & set(paths)) | set(found) | set(earlier)
            by_vm, later = vm_changes(
                _covered(record.entries, common),
                None if record.at_stop is None else _covered(record.at_stop, common),
                _covered(now.entries, common),
            )
            if later:
                app.console.warn("changed on the host after the VM stopped, kept as they are: "
                                 + ", ".join(shown(change.path) for change in later))
            if by_vm:
                outcome = _decide(app, store, now, by_vm, ask or ask_on_the_terminal)
                if outcome.reverted:
                    found = guard_files.git_dir_entries(root, host_git)
        recorded = GuardRecord(str(root), paths, now.entries, vm_may_write_after, None, tuple(found), host_git)
        if recorded != record:  # a warm start whose files did not change writes nothing
            store.save(recorded, now.contents)
    return outcome


MOVED_FILE = "moved.yaml"


def catch_while_running(state_root: Path, slug: str, log: Callable[[str], None]) -> list[str]:
    """While the VM runs: every git directory that appeared below the checkout since the record
    (a nested repository, a `.git` file, a bare repository's shape) is moved into the review
    folder before the host's git or an editor runs git there; each is told at the next review.
    The paths moved."""
    store = GuardStore(state_root / slug)
    with store.lock():
        record = store.load()
        if record is None or not record.vm_may_write or not Path(record.root).is_dir():
            return []
        return _move_new_git_dirs(store, record, log)


def _move_new_git_dirs(store: GuardStore, record: GuardRecord, log: Callable[[str], None]) -> list[str]:
    """Each whole, so nothing of one stays behind to be read; noted for `_tell_moved`."""
    from datetime import UTC, datetime

    root = Path(record.root)
    new = [path for path in guard_files.git_dir_entries(root, record.host_git) if path not in record.git_entries]
    if not new:
        return []
    folder = guard_files.new_review_folder(root, REVIEW_FOLDER, datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    moved: list[str] = []
    for path in new:
        try:
            kept = guard_files.move_aside(root, path, folder)
        except OSError as error:
            log(f"cannot move the VM's git directory {shown(path)} aside: {error}")
            continue
        if kept is not None:
            moved.append(f"{path} -> {kept}")
            log(f"moved the git directory the VM made at {shown(path)} to {shown(kept)}")
    if moved:
        write_yaml(store.folder / MOVED_FILE, {"moved": [*_read_moved(store), *moved]})
    return moved


def _read_moved(store: GuardStore) -> list[str]:
    try:
        data = read_yaml_mapping(store.folder / MOVED_FILE) or {}
    except UnreadableState:
        return []
    listed = data.get("moved")
    return [str(item) for item in listed] if isinstance(listed, list) else []


def _tell_moved(app: App, store: GuardStore) -> None:
    moved = _read_moved(store)
    if not moved:
        return
    app.console.warn(f"{len(moved)} git director(y/ies) the VM made below the checkout were moved aside while it "
                     "ran, before git on this host could read their configuration or hooks:",
                     hint="look at them there; move one back only if you trust every file in it")
    for line in moved:
        app.console.note(f"  {shown(line)}")
    (store.folder / MOVED_FILE).unlink(missing_ok=True)


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


def note_vm_stopped(state_root: Path, slug: str) -> None:
    """The tool stopped the VM: what the guarded files hold now is where the VM left them."""
    store = GuardStore(state_root / slug)
    with store.lock():
        record = store.load()
        if record is None or not record.vm_may_write or not Path(record.root).is_dir():
            return
        now = guard_files.take_snapshot(Path(record.root), (*record.paths, *record.git_entries))
        store.save(record._replace(vm_may_write=False, at_stop=now.entries), {})


def status(app: App) -> GuardStatus:
    store = GuardStore(app.state.project_dir(app.project.slug))
    paths = guarded_paths(app.settings, app.project.root)
    record = store.load()
    git = _git_lines(app)
    if record is None or record.root != str(app.project.root):
        return GuardStatus(False, paths, git=git)
    found = guard_files.git_dir_entries(app.project.root, app.project.is_git)
    now = guard_files.take_snapshot(app.project.root, (*paths, *found, *record.git_entries))
    common = (set(record.paths) & set(paths)) | set(found) | set(record.git_entries)
    baseline, current = _covered(record.entries, common), _covered(now.entries, common)
    moved = tuple(_read_moved(store))
    if not record.vm_may_write and record.at_stop is None:
        return GuardStatus(True, paths, False, (), tuple(changes(baseline, current)), moved, git)
    at_stop = None if record.at_stop is None else _covered(record.at_stop, common)
    by_vm, later = vm_changes(baseline, at_stop, current)
    return GuardStatus(True, paths, record.vm_may_write, tuple(by_vm), tuple(later), moved, git)


def _git_lines(app: App) -> tuple[str, ...]:
    if not app.project.is_git:
        return ()
    from opencode_sandbox.services.vm_git import standing

    return tuple(standing(app.project.root))


def render_status(found: GuardStatus, output_format: str) -> str:
    if output_format == "json":
        import json

        return json.dumps({
            "recorded": found.recorded,
            "state": "changed" if found.by_vm or found.moved else "clean",
            "vm_may_write": found.vm_may_write,
            "guarded": list(found.paths),
            "changed": [change.as_mapping() for change in found.by_vm],
            "changed_on_host": [change.as_mapping() for change in found.on_host],
            "moved_aside": list(found.moved),
            "git": list(found.git),
        }, indent=2)
    lines = [f"guarded: {', '.join(found.paths)}, and any git directory below the checkout"]
    git = [f"git: {line}" for line in found.git]
    if not found.recorded:
        return "\n".join([*lines, "state: not recorded yet (the next run, shell or serve records it)", *git])
    if not found.by_vm and not found.moved:
        lines.append("state: clean")
    elif not found.by_vm:
        lines.append("state: the VM made git directories below the checkout (moved aside, listed below)")
    else:
        lines.append("state: changed while a VM ran (the next run, shell, detach or stop asks to keep or revert):")
        lines += [f"  {change.headline()}" for change in found.by_vm]
    if found.on_host:
        lines.append("changed on the host (yours, kept; recorded as they are at the next start):")
        lines += [f"  {change.headline()}" for change in found.on_host]
    if found.moved:
        lines.append("git directories the VM made, moved aside while it ran:")
        lines += [f"  {shown(line)}" for line in found.moved]
    return "\n".join([*lines, *git])


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
