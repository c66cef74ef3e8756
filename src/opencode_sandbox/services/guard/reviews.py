"""The guard on files the host runs: recorded at every start of the project VM, reviewed at the
next `run`, `shell`, detach and `stop`, shown by `guard status`.

The record (`guard_store`) says whether a VM may have written the checkout since it was taken:
only then are changes counted as the VM's. While the VM runs, the idle reaper moves what it changes
out of the host's way within seconds (`guard_moves`); the next review tells what was moved.
When the tool stops the VM (the idle reaper, `stop`, `kill`), the files are read again at once
(`note_vm_stopped`), so what the user changes on the host afterwards is told apart and kept.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard import (
    DEFAULT_GUARDED,
    FILE,
    Change,
    changes,
    diff_lines,
    shown,
    vm_changes,
)
from opencode_sandbox.core.guard_privileged import PUT_BACK_HINT, Caught, Privileged
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.services.guard import aside as guard_aside
from opencode_sandbox.services.guard import files as guard_files
from opencode_sandbox.services.guard import mounts as guard_mounts
from opencode_sandbox.services.guard import moves as guard_moves
from opencode_sandbox.services.guard import walk as guard_walk
from opencode_sandbox.services.guard import watch_failure
from opencode_sandbox.services.guard.store import GuardRecord, GuardStore, covered, watched
from opencode_sandbox.services.reaper_looks import record_stamp
from opencode_sandbox.state_layout import ProjectLayout, StateLayout
from opencode_sandbox.ui.prompts import confirm

if TYPE_CHECKING:
    from opencode_sandbox.app import App
    from opencode_sandbox.config.settings import Settings
    from opencode_sandbox.ui.console import Console


class Review(Record):
    by_vm: tuple[Change, ...] = ()
    reverted: bool = False
    review_folder: str = ""
    """Where the VM's versions reverted are kept (an absolute path), when they were."""

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
    held: tuple[str, ...] = ()
    """Guarded files the VM changed while it ran, put back as they were, not yet told."""
    privileged: tuple[Caught, ...] = ()
    """Privileged entries the VM made while it ran, and what was done about each, not yet told."""
    unrecorded: tuple[Privileged, ...] = ()
    """Privileged entries that appeared while a VM may write, not neutralised yet."""
    git: tuple[str, ...] = ()
    """How the host's branches and the VM's stand (docs/git.md)."""
    held_branches: tuple[str, ...] = ()
    """The VM's branches the host holds, each with why and how to take it (docs/git.md)."""


def guarded_paths(settings: Settings, root: Path | None = None, hooks: Path | None = None,
                  included: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The default list, the `guarded-paths` setting, the folder the host's git runs hooks
    from (`hooks`, `GitPaths.hooks`) when it lies in the checkout (`root`) outside `.git`, and the
    files of the checkout the host's git config includes (`included`)."""
    inside = _inside(root, hooks) if root is not None and hooks is not None else None
    return tuple(dict.fromkeys((*DEFAULT_GUARDED, *settings.guarded_paths, *([inside] if inside else []),
                                *included)))


def host_run_paths(app: App) -> tuple[str, ...]:
    """What the host runs of this checkout: `guarded_paths` with the host's hooks folder and the
    files its git config includes, names as programs or reaches through the hooks' links."""
    from opencode_sandbox.services.guard.config_files import named_in_config

    paths = app.git_paths
    configs = (paths.common_dir / "config", paths.git_dir / "config.worktree") if paths is not None else ()
    return guarded_paths(app.settings, app.project.root, hooks_of(app),
                         named_in_config(app.project.root, configs, hooks_of(app)))


def guarded_below_found(app: App) -> tuple[str, ...]:
    """The default guarded paths in folders below the checkout's top that the last review found,
    shortest first (`GuardRecord.below`); none when the record is of another checkout."""
    record = GuardStore(app.state.project_dir(app.project.slug)).load()
    if record is None or record.root != str(app.project.root):
        return ()
    return tuple(sorted(record.below, key=lambda path: (path.count("/"), path)))


def hooks_of(app: App) -> Path | None:
    paths = app.git_paths
    return paths.hooks if paths is not None else None


def snapshot(root: Path, paths: Sequence[str]) -> guard_files.Snapshot:
    """The guarded files' snapshot; a checkout that holds more of them than the guard may read is
    an error that stops the command: the guard does not go on blind."""
    try:
        return guard_files.take_snapshot(root, paths)
    except guard_files.OverBudget as error:
        raise over_budget(error) from None


def over_budget(error: guard_files.OverBudget) -> SandboxError:
    return SandboxError(f"the checkout holds more than the guard reads: {shown(str(error))}",
                        hint="the VM may have filled it to blind the guard: with no VM running, look at that "
                             "folder, remove what you did not put there and move the rest out of the checkout; "
                             "`opencode-sandbox guard status` tells when it fits")


def _inside(root: Path, hooks: Path) -> str | None:
    inside = os.path.relpath(os.path.normpath(os.path.join(root, hooks)), root)
    if inside == "." or inside.startswith("..") or inside == ".git" or inside.startswith(".git/"):
        return None
    return inside


def review(app: App, *, vm_may_write_after: bool, ask: Callable[[str], bool] | None = None,
           ask_reaper: bool = False) -> Review:
    """Compare the guarded files with the record, show what the VM changed, keep or revert it
    (asked on a terminal; reverted without one), and record the result.

    With `ask_reaper` (a start, a detach, a stop once the VM is down), the project's idle reaper is
    asked first: when it answers that it looked at every change its file events reported, against
    this very record, the checkout is not walked (`reaper_looks`): what it did is told, and the
    guarded files the record knows are read and compared as at any review."""
    store = GuardStore(app.state.project_dir(app.project.slug))
    stopped_blind = watch_failure.take(ProjectLayout(app.state.project_dir(app.project.slug)))
    if stopped_blind is not None:
        app.console.warn(stopped_blind, hint="the review below shows what the VM changed; `opencode-sandbox "
                                             "guard status` and the reaper's log say more")
    paths = host_run_paths(app)
    root = app.project.root
    host_git = app.project.is_git
    vouched = _vouched_for(app) if ask_reaper else None
    with store.lock():
        record = store.load()
        if record is not None and record.root != str(root):
            record = None
        if (vouched is not None and record is not None and record.vm_may_write and record.paths == paths
                and record_stamp(store.record_path) == vouched):
            # Nothing new below the checkout since the record but what the reaper already caught: the
            # record's walk stands, and only the guarded files are read again (a write through a
            # mapped file or a second name of one raises no event that names it).
            walked, in_mounts = _walk_of(record), list(record.mount_privileged)
            failed = [each.found for each in guard_moves.read_notes(store).privileged if each.failed]
            unresolved = _tell_moved(app, store, [*walked.privileged, *in_mounts, *failed])
        else:
            walked, in_mounts, unresolved = _catch_and_tell(app, store, record)
        found = walked.git_dirs
        earlier = (*record.git_entries, *record.links_in, *record.below) if record is not None else ()
        below = (*walked.links_in, *walked.guarded_below)
        now = snapshot(root, (*paths, *found, *below, *earlier))
        outcome = Review()
        if record is not None and (record.vm_may_write or record.at_stop is not None):
            common = (set(record.paths) & set(paths)) | set(found) | set(below) | set(earlier)
            by_vm, later = vm_changes(
                covered(record.entries, common),
                None if record.at_stop is None else covered(record.at_stop, common),
                covered(now.entries, common),
            )
            if later:
                app.console.warn("changed on the host after the VM stopped, kept as they are: "
                                 + ", ".join(shown(change.path) for change in later))
            if by_vm:
                asked = ask or (lambda question: confirm(app.console, question, default=True, interactive=True))
                outcome = _decide(app, store, now, by_vm, asked)
                if outcome.reverted:
                    walked = guard_walk.walk_checkout(root, host_git, store.kept_apart)
                    found = walked.git_dirs
        privileged = tuple(each for each in walked.privileged if each not in unresolved)
        recorded = GuardRecord(str(root), paths, now.entries, vm_may_write_after, None, tuple(found),
                               tuple(walked.links_in), tuple(walked.guarded_below), host_git, privileged,
                               _writable_folders(app), tuple(each for each in in_mounts if each not in unresolved))
        if recorded != record:  # a warm start whose files did not change writes nothing
            store.save(recorded, now.contents)
    return outcome


def _walk_of(record: GuardRecord) -> guard_walk.Walk:
    """What the walk that made `record` found, as a walk now would find it."""
    walked = guard_walk.Walk()
    walked.git_dirs = list(record.git_entries)
    walked.links_in = list(record.links_in)
    walked.guarded_below = list(record.below)
    walked.privileged = list(record.privileged)
    return walked


def _vouched_for(app: App) -> str | None:
    """The record the reaper compared everything that changed with, when it says so."""
    from opencode_sandbox.services.reaper_looks import ask_to_look

    answer = ask_to_look(app.paths.state_dir, app.project.slug)
    if answer is None or not answer.startswith("clean "):
        if answer is not None:
            app.console.verbose(f"the idle reaper cannot vouch for the checkout: {shown(answer)}; walking it")
        return None
    return answer.removeprefix("clean ")


def _catch_and_tell(app: App, store: GuardStore, record: GuardRecord | None
                    ) -> tuple[guard_walk.Walk, list[Privileged], frozenset[Privileged]]:
    """The checkout walked once; what a VM may have made there (or in a folder mounted writable)
    since the record neutralised or moved aside, and all of it told. What the walks found, and
    the privileged entries still not neutralised (never recorded as the user's)."""
    try:
        walked = guard_walk.walk_checkout(app.project.root, app.project.is_git, store.kept_apart)
    except guard_files.OverBudget as error:
        raise over_budget(error) from None
    in_mounts = guard_mounts.walk(_writable_folders(app))
    if record is not None and record.vm_may_write:
        guard_moves.catch_new(store, record, walked, app.console.verbose, in_mounts)
    if walked.unwalked:
        app.console.error(f"{len(walked.unwalked)} folder(s) below the checkout cannot be looked into, so a "
                          "set-user-ID file or device node the VM left there cannot be caught: "
                          + "; ".join(shown(folder) for folder in walked.unwalked),
                          "remove them with no VM running (`sudo rm -rf -- PATH` for one that is not yours), "
                          "and run nothing from inside them")
    return walked, in_mounts, _tell_moved(app, store, [*walked.privileged, *in_mounts])


def _writable_folders(app: App) -> tuple[str, ...]:
    """The host folders besides the checkout that the VM may write: `mounts` with `:rw`, and the
    VM's own git directory in the project's state folder."""
    git_dir = StateLayout(app.paths.state_dir).project(app.project.slug).vm_git
    return (*guard_mounts.writable_folders(app.settings), *([str(git_dir.resolve())] if git_dir.is_dir() else []))


def _tell_moved(app: App, store: GuardStore, privileged_now: Sequence[Privileged]) -> frozenset[Privileged]:
    notes = guard_moves.read_notes(store)
    console = app.console
    if notes.moved:
        console.warn(f"{len(notes.moved)} git director(y/ies), or link(s) into what was set aside, that the VM made "
                     "below the checkout were moved aside while it ran, before git or another program on this host "
                     "could read them:",
                     hint="look at their files there, but run no git command in one (nor a shell whose prompt "
                          "runs git): git would obey its configuration and hooks; move one back only if you "
                          "trust every file in it")
        for line in notes.moved:
            console.note(f"  {shown(line)}")
    if notes.held:
        console.warn(f"{len(notes.held)} file(s) the host runs were changed while the VM ran and put back as they "
                     "were within seconds:",
                     hint="the changed versions are kept where shown; copy one back, with no VM running, only "
                          "if you trust it (your own edits made while the VM ran are put back the same way)")
        for held in notes.held:
            console.note(f"  {shown(held.line())}")
            for line in held.diff:
                console.note(f"    {shown(line)}")
    for folder, count in notes.unlisted_in:
        console.note(f"  {shown(folder)}/: {count} more file(s) put back the same way, not listed")
    if notes.unlisted:
        console.warn(f"{notes.unlisted} more of the VM's changes were moved aside or put back the same way, not "
                     f"listed; the review folder holds what was kept: {shown(str(store.review))}")
    unresolved = [each for each in notes.privileged if each.failed and each.found in privileged_now]
    _tell_privileged(console, notes.privileged, unresolved)
    if notes.moved or notes.held or notes.privileged or notes.unlisted or notes.unlisted_in:
        guard_moves.clear_notes(store, keep=unresolved)
    return frozenset(each.found for each in unresolved)


def _tell_privileged(console: Console, caught: Sequence[Caught], unresolved: Sequence[Caught]) -> None:
    done = [each for each in caught if not each.failed]
    if done:
        console.warn(f"{len(done)} privileged file(s) or device node(s) the VM made below the checkout lost their "
                     "privileges while it ran, before anything on this host could run or open them:",
                     hint=PUT_BACK_HINT)
        for each in done:
            console.note(f"  {each.line()}")
    for each in unresolved:
        console.error(each.line(),
                      hint="until it is done, anyone who can reach it can run it with its owner's rights or open "
                           "the device; this is said at every start until it is gone")


def _decide(app: App, store: GuardStore, now: guard_files.Snapshot, by_vm: Sequence[Change],
            ask: Callable[[str], bool]) -> Review:
    console = app.console
    console.warn(f"{len(by_vm)} file(s) the host runs changed while the VM ran:")
    for change in by_vm:
        show_change(console, store, now, change)
    question = f"Revert them? The VM's versions are kept under {shown(str(store.review))}/"
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
    folder = guard_moves.new_review_folder(store)
    put_aside = guard_moves.revert(app.project.root, store, now, by_vm, folder,
                                   lambda message, hint: console.warn(message, hint=hint))
    console.warn(f"reverted {len(by_vm)} change(s); the VM's versions are kept in {shown(str(folder))}")
    for path, aside in put_aside.items():
        if aside.not_kept:
            console.warn(f"{shown(path)}: the VM's version was removed, not kept: {aside.not_kept}",
                         hint=f"the review folder lies on another file system than the checkout, so the VM's "
                              f"version had to be copied there (at most {guard_aside.MOVE_COPY_LIMIT >> 20} MiB "
                              "of one), and could not be; nothing of it remains")
    return Review(tuple(by_vm), True, str(folder))


def show_change(console: Console, store: GuardStore, now: guard_files.Snapshot, change: Change) -> None:
    console.note(f"  {change.headline()}")
    before = store.copy_of(change.before) if change.before is not None and change.before.kind == FILE else None
    after = now.contents.get(change.path) if change.after is not None else None
    if change.what == "mode changed":
        return
    for line in diff_lines(change, before, after):
        console.note(f"    {line}")


def note_vm_stopped(state_root: Path, slug: str, log: Callable[[str], None] = lambda _: None) -> None:
    """The tool stopped the VM: what the guarded files hold now is where the VM left them, and
    what it made since the last round of the watch is caught like the watch catches it."""
    store = GuardStore(StateLayout(state_root).project(slug).folder)
    with store.lock():
        record = store.load()
        if record is None or not record.vm_may_write or not Path(record.root).is_dir():
            return
        walked = guard_walk.walk_checkout(Path(record.root), record.host_git, store.kept_apart)
        guard_moves.catch_new(store, record, walked, log)
        now = guard_files.take_snapshot(Path(record.root), watched(record, walked.guarded_below))
        store.save(record._replace(vm_may_write=False, at_stop=now.entries), {})


def status(app: App) -> GuardStatus:
    store = GuardStore(app.state.project_dir(app.project.slug))
    paths = host_run_paths(app)
    record = store.load()
    git = _git_lines(app)
    held_branches = _held_branch_lines(app)
    if record is None or record.root != str(app.project.root):
        return GuardStatus(False, paths, git=git, held_branches=held_branches)
    vouched = _vouched_for(app) if record.vm_may_write else None
    if vouched is not None and record.paths == paths and record_stamp(store.record_path) == vouched:
        walked = _walk_of(record)  # the reaper looked at every change since the record: nothing new to find
    else:
        walked = guard_walk.walk_checkout(app.project.root, app.project.is_git, store.kept_apart)
    found = walked.git_dirs
    below = (*walked.links_in, *walked.guarded_below, *record.links_in, *record.below)
    now = snapshot(app.project.root, (*paths, *found, *record.git_entries, *below))
    common = (set(record.paths) & set(paths)) | set(found) | set(record.git_entries) | set(below)
    baseline, current = covered(record.entries, common), covered(now.entries, common)
    notes = guard_moves.read_notes(store)
    told = GuardStatus(True, paths, record.vm_may_write, moved=notes.moved,
                       held=tuple(each.line() for each in notes.held), privileged=notes.privileged,
                       unrecorded=_unrecorded(record, walked, notes.privileged), git=git,
                       held_branches=held_branches)
    if not record.vm_may_write and record.at_stop is None:
        return told._replace(on_host=tuple(changes(baseline, current)))
    at_stop = None if record.at_stop is None else covered(record.at_stop, common)
    by_vm, later = vm_changes(baseline, at_stop, current)
    return told._replace(by_vm=tuple(by_vm), on_host=tuple(later))


def _unrecorded(record: GuardRecord, walked: guard_walk.Walk, told: Sequence[Caught]) -> tuple[Privileged, ...]:
    """Privileged entries below the checkout that are neither the user's (in the record, or made
    with no VM running) nor already told as not neutralised."""
    if not record.vm_may_write:
        return ()
    known = {*record.privileged, *(each.found for each in told)}
    return tuple(each for each in walked.privileged if each not in known)


def _git_lines(app: App) -> tuple[str, ...]:
    if not app.project.is_git:
        return ()
    from opencode_sandbox.services.vm_git import standing

    return tuple(standing(app.project.root))


def _held_branch_lines(app: App) -> tuple[str, ...]:
    from opencode_sandbox.services.vm_git import held_lines

    return tuple(held_lines(app.state.project_dir(app.project.slug))) if app.project.is_git else ()




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
