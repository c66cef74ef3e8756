"""The text of `diff`: a headline per changed path, then the host's current content against the
VM's, within a line limit per file and in all. Every line is escaped with `shown`."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping

from opencode_sandbox.core.guard import is_text, shown
from opencode_sandbox.core.vm_commits import ABSENT, GITLINK, SYMLINK
from opencode_sandbox.services.isolated import flags as rules
from opencode_sandbox.services.isolated.changes import SHOWN_BYTES, Change, Work
from opencode_sandbox.services.isolated.host_tree import FILE, LINK, NOTHING, HostEntry
from opencode_sandbox.services.isolated.refs import FROM_MERGE_BASE, FROM_NOTHING

FILE_LINE_LIMIT = 400
TOTAL_LINE_LIMIT = 4000


def lines(work: Work, vm_contents: Mapping[str, bytes]) -> Iterator[str]:
    where = work.where
    base = {FROM_NOTHING: "nothing (no common history)", FROM_MERGE_BASE: f"the merge base {where.base[:12]}"}.get(
        where.base_from, f"{where.base_ref} {where.base[:12]}")
    count = len(work.changes)
    yield (f"The VM's work on {shown(where.branch)}: {count} change{'s' if count != 1 else ''} from {base} to the "
           f"VM's commit {where.wip}, against the host's work tree (`apply --exactly {where.wip[:12]}...` "
           "takes this very commit)")
    left = TOTAL_LINE_LIMIT
    held_back = 0
    for change in work.changes:
        yield headline(change)
        body = list(_body(change, vm_contents))
        if len(body) > FILE_LINE_LIMIT:
            body = [*body[:FILE_LINE_LIMIT], f"  ... {len(body) - FILE_LINE_LIMIT} more lines not shown"]
        yield from body[:left]
        held_back += max(0, len(body) - left)
        left = max(0, left - len(body))
    if held_back:
        yield f"... {held_back} more lines not shown (the diff stops at {TOTAL_LINE_LIMIT} lines in all)"
    for flag in sorted({flag for change in work.changes for flag in change.flags}):
        yield rules.legend(flag)
    if any(change.collides for change in work.changes):
        yield ("[collides] your file differs from both the base's and the VM's version: apply refuses until you "
               "resolve it")


def headline(change: Change) -> str:
    if change.status == rules.ADDED:
        modes = change.new_mode
    elif change.status == rules.DELETED:
        modes = f"was {change.old_mode}"
    else:
        modes = change.old_mode if change.old_mode == change.new_mode else f"{change.old_mode} -> {change.new_mode}"
    marks = [*change.flags, *(["collides"] if change.collides else [])]
    return f"{change.status} {shown(change.path)} ({modes})" + (f" [{', '.join(marks)}]" if marks else "")


def _body(change: Change, vm_contents: Mapping[str, bytes]) -> Iterator[str]:
    """A side that is no file (a link, a folder, nothing) is named, and diffed as empty."""
    host = change.host
    if GITLINK in (change.old_mode, change.new_mode):
        yield f"  submodule commit {change.new_id if change.new_mode == GITLINK else change.old_id}"
        return
    if change.already_on_host:
        yield "  the host's work tree holds this already"
        return
    if change.new_mode == SYMLINK:
        target = "(not read)" if change.link_target is None else shown(_text(change.link_target))
        yield f"  VM: symlink to {target}"
    if host.kind not in (FILE, NOTHING) or host.in_the_way:
        yield f"  host: {_host_description(host)}"
    vm_has_file = change.new_mode not in (ABSENT, SYMLINK)
    before = host.content if host.kind == FILE else b""
    after = vm_contents.get(change.new_id) if vm_has_file else b""
    if before is None or after is None:
        yield (f"  not shown: host {_size(host)}, VM {_vm_size(change)} (a file over {SHOWN_BYTES} bytes, "
               f"or past what one diff reads, is not shown)")
        return
    if not (is_text(before) and is_text(after)):
        yield f"  binary: host {_size(host)}, VM {_vm_size(change)}"
        return
    path = shown(change.path)
    old_label = f"host/{path}" if host.kind == FILE else "/dev/null"
    new_label = f"vm/{path}" if vm_has_file else "/dev/null"
    for line in difflib.unified_diff(_split(before), _split(after), old_label, new_label):
        yield shown(line.removesuffix("\n"))


def _host_description(host: HostEntry) -> str:
    if host.in_the_way:
        what = "a symlink" if host.in_the_way_is_link else "not a folder"
        return f"{shown(host.in_the_way)} is {what}"
    if host.kind == LINK:
        return f"symlink to {shown(_text(host.content or b''))}"
    return host.kind


def _size(host: HostEntry) -> str:
    return f"{host.size} bytes" if host.kind == FILE else host.kind


def _vm_size(change: Change) -> str:
    return {ABSENT: "deleted", SYMLINK: "symlink"}.get(change.new_mode, f"{change.new_size} bytes")


def _split(data: bytes) -> list[str]:
    """Lines as git counts them, split at newlines only: a carriage return stays inside its line,
    where `shown` makes it visible."""
    text = data.decode("utf-8")
    parts = text.split("\n")
    ended = [part + "\n" for part in parts[:-1]]
    return [*ended, parts[-1]] if parts[-1] else ended


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")
