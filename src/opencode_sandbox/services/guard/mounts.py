"""Privileged entries in the host folders mounted writable into the VM (`mounts` entries with
`:rw`): caught like those of the checkout (`guard_privileged`), while the VM runs and at the
review. Their paths are absolute, so the notes and the review name them as the host does.

A writable file mount is left out: the VM can change its content, never its mode, owner or kind
(a write clears a set-user-ID bit, and the mount's target cannot be replaced)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard_privileged import Caught, Privileged
from opencode_sandbox.services.guard import privileged as guard_privileged
from opencode_sandbox.services.guard import walk as guard_walk

if TYPE_CHECKING:
    from opencode_sandbox.config.settings import Settings

HOST_ROOT = Path("/")


def writable_folders(settings: Settings) -> tuple[str, ...]:
    """The folders of `mounts` the VM may write, as the runtime mounts them (links resolved)."""
    folders: list[str] = []
    for mount in settings.mounts:
        if mount.readonly:
            continue
        try:
            source = mount.source.resolve(strict=True)
        except OSError:
            continue  # the start refuses it with its reason
        if source.is_dir():
            folders.append(str(source))
    return tuple(dict.fromkeys(folders))


def walk(folders: Sequence[str]) -> list[Privileged]:
    """Every privileged entry below the folders, by its absolute path; a folder that is gone is
    skipped (the start that mounts it again refuses it)."""
    found: list[Privileged] = []
    for folder in folders:
        try:
            walked = guard_walk.walk_checkout(Path(folder), host_git=False)
        except OSError:
            continue
        found += [each._replace(path=f"{folder.rstrip('/')}/{each.path}") for each in walked.privileged]
    return found


def neutralise_new(found: list[Privileged], known: Sequence[Privileged]) -> list[Caught]:
    """Each of `found` (`walk`) not in `known` neutralised: what was done about each. `found` is
    updated to what remains privileged (the known ones, and those that could not be)."""
    caught: list[Caught] = []
    for each in [entry for entry in found if entry not in known]:
        outcome = guard_privileged.neutralise(HOST_ROOT, each._replace(path=each.path.lstrip("/")), ())
        if outcome is None:
            continue
        caught.append(outcome._replace(found=outcome.found._replace(path="/" + outcome.found.path)))
        if not outcome.failed:
            found.remove(each)
    return caught
