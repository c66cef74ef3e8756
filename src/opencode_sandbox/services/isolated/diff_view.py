"""`diff`: the VM's work against the host's work tree, as text for the terminal or one JSON
document. Whatever comes from the VM (paths, link targets, content) is escaped: no control
character of it reaches the terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.vm_commits import GITLINK
from opencode_sandbox.services.isolated import diff_text
from opencode_sandbox.services.isolated import flags as rules
from opencode_sandbox.services.isolated.changes import SHOWN_BYTES, Change, Work, read_work
from opencode_sandbox.services.isolated.host_tree import FILE
from opencode_sandbox.services.isolated.objects import contents
from opencode_sandbox.services.isolated.refs import chosen_branch

if TYPE_CHECKING:
    from opencode_sandbox.app import App

SHOWN_TOTAL_BYTES = 32 * 1024 * 1024
"""The most of the VM's file contents one `diff` reads to show."""
NOT_YET = ("the VM's work on {branch} has not reached the host yet: it does at each start, detach and stop, "
           "and while the VM runs")


def show(app: App, branch: str | None, output_format: str) -> None:
    work = work_of(app, branch)
    if work is None:
        return
    if output_format == "json":
        app.console.result(as_json(work))
        return
    vm_contents = contents(app.project.root, _shown_ids(work.changes), work.where.object_format,
                           limit=SHOWN_TOTAL_BYTES)
    for line in diff_text.lines(work, vm_contents):
        app.console.result(line)


def work_of(app: App, branch: str | None, exactly: str | None = None) -> Work | None:
    """The VM's work on `branch`, read with the project's guarded paths; None, after saying so, when
    it has not reached the host."""
    root = app.project.root
    from opencode_sandbox.services.guard.reviews import host_run_paths
    from opencode_sandbox.services.isolated.linked import link_targets

    guarded = host_run_paths(app)
    work = read_work(root, branch, (*guarded, *link_targets(root, guarded)), exactly)
    if work is None:
        app.console.info(NOT_YET.format(branch=shown(chosen_branch(root, branch))))
    return work


def _shown_ids(changes: Sequence[Change]) -> list[str]:
    """The VM's files small enough to show, within `SHOWN_TOTAL_BYTES` in all."""
    wanted: list[str] = []
    total = 0
    for change in changes:
        readable = change.new_mode.startswith("100") and rules.NOT_A_BLOB not in change.flags
        if readable and change.new_size <= SHOWN_BYTES:
            if total + change.new_size > SHOWN_TOTAL_BYTES:
                break
            total += change.new_size
            wanted.append(change.new_id)
    return wanted


def applied_how(change: Change) -> str:
    """What `apply` does with it: "never", "asked" or "applied"."""
    return "never" if change.never else "asked" if change.asked else "applied"


def as_json(work: Work) -> str:
    where = work.where
    return json.dumps({"command": "diff", "result": {
        "branch": shown(where.branch), "base": where.base, "base_from": where.base_from, "wip": where.wip,
        "changes": [_change_mapping(change) for change in work.changes],
    }}, indent=2)


def _change_mapping(change: Change) -> dict[str, object]:
    host = change.host
    return {
        "path": shown(change.path), "status": change.status, "old_mode": change.old_mode,
        "new_mode": change.new_mode, "old_id": change.old_id, "new_id": change.new_id,
        "flags": list(change.flags), "collides": change.collides, "apply": applied_how(change),
        "link_target": None if change.link_target is None else shown(_text(change.link_target)),
        "submodule_commit": change.new_id if change.new_mode == GITLINK else None,
        "host": {"kind": host.kind, "mode": host.mode or None, "size": host.size if host.kind == FILE else None,
                 "object_id": host.object_id or None},
    }


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")
