"""`apply`: the VM's work brought into the host's work tree as uncommitted changes. Nothing is
committed, no branch moves, `.git` is never touched; a user's own change is never overwritten."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_commits import ABSENT, SYMLINK
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.services.guard.paths import DIRECTORY
from opencode_sandbox.services.isolated import flags as rules
from opencode_sandbox.services.isolated.changes import Change, Work
from opencode_sandbox.services.isolated.diff_view import work_of
from opencode_sandbox.services.isolated.new_base import move_base
from opencode_sandbox.services.isolated.objects import contents
from opencode_sandbox.services.isolated.writes import InTheWay, delete, put

if TYPE_CHECKING:
    from opencode_sandbox.app import App

APPLY_BYTES = 256 * 1024 * 1024
"""The most of the VM's file contents one `apply` reads and writes."""


class LeftOut(Record):
    change: Change
    why: str


def apply(app: App, branch: str | None, yes: bool, exactly: str | None = None) -> None:
    """`exactly`: the VM's commit to take, the one the user looked at, rather than its newest."""
    root = app.project.root
    work = work_of(app, branch, exactly)
    if work is None:
        return
    if not work.changes:
        app.console.info(f"the host's work tree already holds the VM's work on {shown(work.where.branch)}")
        return
    taken, left_out = _sorted_out(work.changes, yes)
    _refuse_collisions(work, taken)
    _refuse_too_large(work, taken)
    asking = [change for change in taken if change.asked]
    if asking and not (app.interactive and app.console.asker is not None):
        raise UsageError(f"{len(asking)} of the VM's changes need your word: "
                         + ", ".join(shown(change.path) for change in asking[:10]),
                         hint="run `opencode-sandbox apply` in a terminal to be asked about each, or pass -y to "
                              "leave them all out")
    for change in asking:
        if not _agreed(app, change):
            taken.remove(change)
            left_out.append(LeftOut(change, f"{', '.join(change.asked)}: you answered no"))
    applied, failed = _write(root, work, taken)
    left_out += failed
    new_base = move_base(root, work.where, [each.change for each in left_out])
    _report(app, work, applied, left_out, new_base)


def _sorted_out(changes: Sequence[Change], yes: bool) -> tuple[list[Change], list[LeftOut]]:
    taken: list[Change] = []
    left_out: list[LeftOut] = []
    for change in changes:
        if change.never:
            left_out.append(LeftOut(change, "; ".join(f"{flag}: {rules.MEANING[flag]}" for flag in change.never)
                                    + ", never applied"))
        elif change.asked and yes:
            left_out.append(LeftOut(change, f"{', '.join(change.asked)}: left out with --yes; run apply in a "
                                            "terminal to be asked"))
        else:
            taken.append(change)
    return taken, left_out


def _refuse_collisions(work: Work, taken: Sequence[Change]) -> None:
    colliding = [change for change in taken if change.collides]
    if not colliding:
        return
    listed = "\n".join(f"  {shown(change.path)}" for change in colliding)
    raise SandboxError(
        f"nothing applied: {len(colliding)} path(s) changed in the host's work tree as well as in the VM, "
        f"and differ from both the base's and the VM's version:\n{listed}",
        hint="commit or stash your change (git stash) and run apply again, or take the VM's version by hand: "
             f"git show {work.where.wip}:<path>")


def _refuse_too_large(work: Work, taken: Sequence[Change]) -> None:
    total = sum(change.new_size for change in taken if change.new_mode.startswith("100"))
    if total > APPLY_BYTES:
        raise SandboxError(f"nothing applied: the VM's files come to {total} bytes, more than the {APPLY_BYTES} "
                           "one apply writes",
                           hint=f"take the largest by hand: git show {work.where.wip}:<path> > <path>")


def _agreed(app: App, change: Change) -> bool:
    from opencode_sandbox.ui.prompts import confirm

    meanings = "; ".join(rules.MEANING[flag] for flag in change.asked)
    return confirm(app.console, f"Apply {change.status} {shown(change.path)} ({meanings})?", False, True)


def _write(root: Path, work: Work, taken: Sequence[Change]) -> tuple[list[Change], list[LeftOut]]:
    wanted = [change.new_id for change in taken if change.new_mode.startswith("100")]
    blobs = contents(root, wanted, work.where.object_format, limit=APPLY_BYTES) if wanted else {}
    applied: list[Change] = []
    failed: list[LeftOut] = []
    top = os.open(root, DIRECTORY)
    try:
        # Deletions first: a file the VM removed may stand where it made a folder.
        for change in sorted(taken, key=lambda each: (each.new_mode != ABSENT, each.path)):
            content = change.link_target if change.new_mode == SYMLINK else blobs.get(change.new_id)
            if change.new_mode != ABSENT and content is None:
                failed.append(LeftOut(change, "its content could not be read from the host's object store"))
                continue
            try:
                if change.already_on_host:
                    pass
                elif change.new_mode == ABSENT:
                    delete(top, change.path)
                else:
                    put(top, change.path, change.new_mode, content or b"")
            except (InTheWay, OSError) as error:
                failed.append(LeftOut(change, _why(error)))
                continue
            applied.append(change)
    finally:
        os.close(top)
    return applied, failed


def _why(error: Exception) -> str:
    if isinstance(error, OSError):
        return f"not written: {error.strerror or error}"
    return f"not written: {error}"


def _report(app: App, work: Work, applied: Sequence[Change], left_out: Sequence[LeftOut], new_base: str) -> None:
    for change in applied:
        app.console.result(f"applied: {change.status} {shown(change.path)}")
    for each in left_out:
        app.console.result(f"left out: {each.change.status} {shown(each.change.path)} ({shown(each.why)})")
    where = work.where
    summary = f"{len(applied)} applied, {len(left_out)} left out; {where.base_ref} is now {new_base[:12]}"
    if left_out:
        summary += ": what was left out shows again in `opencode-sandbox diff`"
    app.console.result(summary)
