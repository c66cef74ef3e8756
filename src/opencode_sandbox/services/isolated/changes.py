"""The VM's work as the host sees it: every path that differs between the base and the VM's
commit, each with its flags and how the host's work tree stands at that path."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_commits import ABSENT, GITLINK, SYMLINK, TreeChange, parse_diff_tree
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.trees import DIFF_LIMIT
from opencode_sandbox.services.guard.paths import DIRECTORY
from opencode_sandbox.services.isolated import flags as rules
from opencode_sandbox.services.isolated.host_tree import FOLDER, NOT_READ, HostEntry, look
from opencode_sandbox.services.isolated.objects import BLOB, Found, contents, look_up
from opencode_sandbox.services.isolated.refs import Located, chosen_branch, locate

CHANGE_LIMIT = 10_000
"""The most changed paths `diff` and `apply` read at once: the VM picks how many there are."""
SHOWN_BYTES = 1024 * 1024
"""A file of at most this size is read to be shown (the host's and the VM's alike)."""


class Change(Record):
    path: str
    """As git names it; bytes that are not UTF-8 are kept as surrogates (`shown` escapes them)."""
    status: str
    old_mode: str
    new_mode: str
    old_id: str
    new_id: str
    new_size: int
    flags: tuple[str, ...]
    collides: bool
    """The host's file is neither the base's nor the VM's version: the user changed it too."""
    host: HostEntry
    link_target: bytes | None = None
    """The VM's link target, when the VM's version is a link."""

    @property
    def never(self) -> tuple[str, ...]:
        """The flags that keep it out of the host's work tree whatever the user says."""
        return tuple(flag for flag in self.flags if flag in rules.NEVER_APPLIED)

    @property
    def already_on_host(self) -> bool:
        """The host's work tree holds the VM's version already."""
        wanted = (ABSENT, "") if self.new_mode == ABSENT else (self.new_mode, self.new_id)
        return self.host.kind != NOT_READ and self.host.state() == wanted

    @property
    def asked(self) -> tuple[str, ...]:
        return tuple(flag for flag in self.flags if flag in rules.ASKED)


class Work(Record):
    where: Located
    changes: tuple[Change, ...]


def read_work(root: Path, branch: str | None, guarded: Sequence[str], exactly: str | None = None) -> Work | None:
    """The VM's work on `branch` (default: the host's checked-out one); None when it has not reached
    the host."""
    object_format = host_git.text(root, "rev-parse", "--show-object-format")
    if not object_format:
        raise UsageError(f"{root} is not a git checkout: the VM's work reaches the host as git data only",
                         hint="run it inside the checkout the VM works on")
    located = locate(root, chosen_branch(root, branch), object_format, exactly)
    if located is None:
        return None
    try:
        found_changes = parse_diff_tree(host_git.bounded(root, "diff-tree", "-r", "-z", "--no-renames", located.base,
                                                         located.wip, "--", limit=DIFF_LIMIT))
    except host_git.TooMuch:
        raise _too_many(located) from None
    if len(found_changes) > CHANGE_LIMIT:
        raise _too_many(located)
    return Work(located, tuple(_changes(root, found_changes, object_format, guarded)))


def _too_many(located: Located) -> SandboxError:
    return SandboxError(f"the VM's work changes more than {CHANGE_LIMIT} paths, more than this command reads at once",
                        hint="look at it with git alone: git diff --stat --no-textconv --no-ext-diff "
                             f"{located.base} {located.wip}")


def _changes(root: Path, found_changes: Sequence[TreeChange], object_format: str,
             guarded: Sequence[str]) -> list[Change]:
    objects = look_up(root, [*(each.new_id for each in found_changes), *(each.old_id for each in found_changes)],
                      object_format)
    link_ids = [each.new_id for each in found_changes if each.new_mode == SYMLINK
                and objects.get(each.new_id, Found("")).size <= rules.LINK_TARGET_LIMIT]
    targets = contents(root, link_ids, object_format, limit=len(link_ids) * rules.LINK_TARGET_LIMIT)
    top = os.open(root, DIRECTORY)
    try:
        shaped = rules.repository_folders([each.path for each in found_changes], lambda folder: _has_head(top, folder))
        return [_change(top, each, objects, targets, object_format, guarded, shaped) for each in found_changes]
    finally:
        os.close(top)


def _has_head(top: int, folder: str) -> bool:
    """The host's folder holds a `HEAD` in any case (a file system may ignore case)."""
    try:
        descriptor = os.open(folder, DIRECTORY, dir_fd=top)
    except OSError:
        return False
    try:
        return any(name.casefold() == "head" for name in os.listdir(descriptor))
    finally:
        os.close(descriptor)


def _change(top: int, found: TreeChange, objects: Mapping[str, Found], targets: Mapping[str, bytes],
            object_format: str, guarded: Sequence[str], shaped: set[str]) -> Change:
    new = objects.get(found.new_id, Found("missing"))
    old_size = objects.get(found.old_id, Found("")).size
    host = look(top, found.path, object_format, {old_size, new.size}, SHOWN_BYTES)
    flags = rules.path_flags(found.path, found.old_mode, found.new_mode, guarded)
    target = targets.get(found.new_id) if found.new_mode == SYMLINK else None
    if found.new_mode == SYMLINK and (target is None or rules.link_leaves(found.path, target)):
        flags.append(rules.LINK_LEAVES)
    if host.nested and rules.NESTED_GIT not in flags:
        flags.append(rules.NESTED_GIT)
    if found.new_mode not in (ABSENT, GITLINK) and new.kind != BLOB:
        flags.append(rules.NOT_A_BLOB)
    if host.in_the_way_is_link:
        flags.append(rules.LINK_IN_THE_WAY)
    if found.path.rpartition("/")[2].casefold() == "head" or rules.in_repository_shape(found.path, shaped):
        flags.append(rules.REPOSITORY_SHAPE)
    return Change(found.path, rules.status(found.old_mode, found.new_mode), found.old_mode, found.new_mode,
                  found.old_id, found.new_id, new.size, tuple(flags), _collides(found, host), host, target)


def _collides(found: TreeChange, host: HostEntry) -> bool:
    """The host's entry is neither the base's nor the VM's. A folder where the base had nothing is
    not counted: the VM made a file of a folder, and writing never replaces a folder."""
    if GITLINK in (found.old_mode, found.new_mode) or host.kind == NOT_READ or host.in_the_way_is_link:
        return False
    if host.kind == FOLDER and found.old_mode == ABSENT:
        return False
    base = (ABSENT, "") if found.old_mode == ABSENT else (found.old_mode, found.old_id)
    wip = (ABSENT, "") if found.new_mode == ABSENT else (found.new_mode, found.new_id)
    return host.state() not in (base, wip)
