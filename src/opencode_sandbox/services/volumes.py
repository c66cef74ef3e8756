"""`volume reset|migrate|edit`: make a new home volume, and only then switch the project to it.

The order never changes: create the new volume -> fill it from the runner image's /home/dev
(-> copy the old files on top, or let the user transfer them in a shell) -> record it in the
state file -> remove the project's stopped VM (it still mounts the old volume; the next run
recreates it) -> with --rm, remove the old volume. A failure or Ctrl-C before the record
removes the half-made volume; a crash leaves it behind as an unused volume, while the state
file keeps naming the old, complete one.

`edit` opens a shell as `dev` in a throwaway sandbox with the new volume at /home/dev and the
old one read-only at /mnt/old. Exit 0 keeps the new volume; any other exit status abandons
it and the old one stays current.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import home_volume_name, managed_labels, slug_of_home_volume, task_name, vm_name
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import NotFound, OwnedByAnother, SandboxError, UsageError
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec, SandboxStatus
from opencode_sandbox.state.store import StateStore

if TYPE_CHECKING:
    from opencode_sandbox.app import App
    from opencode_sandbox.ui.console import Console

OLD_MOUNT = "/mnt/old"
EDIT_SHELL = ("bash", "-l")
_EDIT_CPUS = 1
_EDIT_MEMORY_MIB = 1024


class VolumeAction(StrEnum):
    RESET = "reset"
    MIGRATE = "migrate"
    EDIT = "edit"


class VolumeChange(Record):
    action: VolumeAction
    slug: str
    old: str
    new: str
    image: str
    remove_old: bool
    stopped_vm: str | None


def plan_change(
    runtime: Runtime,
    store: StateStore,
    project_slug: str,
    action: VolumeAction,
    volume: str | None,
    remove_old: bool,
    now: datetime | None = None,
) -> VolumeChange:
    old = volume or store.load(project_slug).home_volume
    if old is None:
        raise SandboxError(
            "this project has no home volume yet",
            hint="run `opencode-sandbox` once to create it, or name a volume from `opencode-sandbox volume list`",
        )
    slug = slug_of_home_volume(old)
    if slug is None:
        raise UsageError(f"{old} is not a home volume name of opencode-sandbox",
                         hint="pick one from `opencode-sandbox volume list`")
    if runtime.get_volume(old) is None:
        raise NotFound(f"volume {old} does not exist", hint="pick one from `opencode-sandbox volume list`")
    vm = _refuse_active_vm(runtime, slug)
    image = store.load(slug).image_reference
    if not image:
        raise SandboxError(
            f"no runner image is recorded for project {slug}",
            hint="run `opencode-sandbox build` or `opencode-sandbox` first",
        )
    new = free_home_volume_name(runtime, slug, now, taken=old)
    return VolumeChange(action, slug, old, new, image, remove_old, vm)


def free_home_volume_name(runtime: Runtime, slug: str, now: datetime | None = None, taken: str | None = None) -> str:
    """A home volume name of this moment, or of the next second that is free.

    A launcher killed while filling a volume can leave one named for this very second.
    """
    moment = now or datetime.now(UTC)
    name = home_volume_name(slug, moment)
    while name == taken or _exists(runtime.get_volume, name):
        moment += timedelta(seconds=1)
        name = home_volume_name(slug, moment)
    return name


def _exists(get: Callable[[str], object | None], name: str) -> bool:
    """Whether a volume or sandbox of this name exists; another host user's counts."""
    try:
        return get(name) is not None
    except OwnedByAnother:
        return True


def _refuse_active_vm(runtime: Runtime, slug: str) -> str | None:
    """The project's VM if it exists and is stopped; an error while it runs."""
    name = vm_name(slug)
    info = runtime.get_sandbox(name)
    if info is None:
        return None
    if info.status.is_active or info.status is SandboxStatus.PAUSED:
        raise SandboxError(
            f"the project's VM {name} is {info.status.value}; its home volume cannot change under it",
            hint="stop it first with `opencode-sandbox stop`",
        )
    return name


def describe(change: VolumeChange) -> list[str]:
    lines = [f"create {change.new} from the /home/dev of {change.image}"]
    if change.action is VolumeAction.MIGRATE:
        lines.append(f"copy every file of {change.old} on top of it")
    if change.action is VolumeAction.EDIT:
        lines.append(f"open a shell with {change.new} at /home/dev and {change.old} at {OLD_MOUNT} (read-only); "
                     "keep the new volume when the shell exits with 0")
    lines.append(f"record {change.new} as the home volume of project {change.slug}")
    if change.stopped_vm:
        lines.append(f"remove the stopped VM {change.stopped_vm} (the next run recreates it on the new volume)")
    lines.append(f"remove {change.old}" if change.remove_old else f"keep {change.old}")
    return lines


def apply_change(
    runtime: Runtime,
    store: StateStore,
    change: VolumeChange,
    say: Callable[[str], None],
    console: Console,
) -> None:
    warn = console.warn
    with store.first_boot_lock(change.slug, timeout_s=30.0):
        _refuse_active_vm(runtime, change.slug)
        copy_from = change.old if change.action is VolumeAction.MIGRATE else None
        build_home_volume(runtime, change.slug, change.new, change.image, copy_from, warn)
        if change.action is VolumeAction.EDIT:
            try:
                _edit_in_shell(runtime, change, say, console)
            except BaseException:
                _discard(runtime, change.new, warn)
                raise
        store.save(change.slug, store.load(change.slug)._replace(home_volume=change.new))
        say(f"{change.new} is now the home volume of project {change.slug}")
        if change.stopped_vm:
            try:
                runtime.remove_sandbox(change.stopped_vm)
            except NotFound:
                pass
            except SandboxError as error:
                warn(f"could not remove the stopped VM {change.stopped_vm}: {error.message}; "
                     "remove it with `opencode-sandbox stop -f` so the next run uses the new volume")
        if change.remove_old:
            try:
                runtime.remove_volume(change.old)
                say(f"removed {change.old}")
            except SandboxError as error:
                warn(f"could not remove {change.old}: {error.message}")


def build_home_volume(runtime: Runtime, slug: str, name: str, image: str, copy_from: str | None,
                      warn: Callable[[str], None]) -> None:
    """A complete home volume from the image's /home/dev, with `copy_from`'s files on top,
    or nothing at all: a failure or an interrupt removes the half-made volume."""
    runtime.create_volume(name, managed_labels(slug))
    try:
        runtime.fill_volume_from_image(name, image)
        if copy_from:
            runtime.copy_volume(copy_from, name)
    except BaseException:
        _discard(runtime, name, warn)
        raise


def _discard(runtime: Runtime, volume: str, warn: Callable[[str], None]) -> None:
    for attempt in range(5):
        try:
            runtime.remove_volume(volume)
            return
        except NotFound:
            return
        except SandboxError as error:
            if attempt == 4:
                warn(f"could not remove the unfinished volume {volume}: {error.message}")
                return
            time.sleep(1.0)  # a helper that copied into it may still be winding down


def _edit_in_shell(runtime: Runtime, change: VolumeChange, say: Callable[[str], None], console: Console) -> None:
    from opencode_sandbox.services.image_step import load_into_runtime

    image = load_into_runtime(runtime, console, change.image).image.reference
    name = _free_task_name(runtime, change.slug)
    spec = SandboxSpec(
        name=name,
        image=image,
        cpus=_EDIT_CPUS,
        memory_mib=_EDIT_MEMORY_MIB,
        labels=managed_labels(change.slug),
        mounts=(
            Mount(MountKind.VOLUME, change.new, "/home/dev"),
            Mount(MountKind.VOLUME, change.old, OLD_MOUNT, readonly=True),
        ),
        workdir="/home/dev",
        dev_identity=(os.getuid(), os.getgid()),
    )
    runtime.create_sandbox(spec)
    try:
        say(f"New home at /home/dev, old home at {OLD_MOUNT} (read-only). Copy what you need, then "
            "`exit` to keep the new volume, or `exit 1` to abandon it.")
        code = runtime.attach(name, list(EDIT_SHELL), user="dev", workdir="/home/dev")
    finally:
        try:
            runtime.remove_sandbox(name)
        except SandboxError as error:
            console.warn(f"could not remove the edit sandbox {name}: {error.message}")
    if code != 0:
        raise SandboxError(
            f"the shell exited with status {code}; {change.new} is abandoned and {change.old} stays",
            hint="run `opencode-sandbox volume edit` again, and leave the shell with `exit` to keep the result",
        )


def _free_task_name(runtime: Runtime, slug: str) -> str:
    number = int(time.time())
    while _exists(runtime.get_sandbox, task_name(slug, number)):
        number += 1
    return task_name(slug, number)


def change_volume(app: App, action: VolumeAction, volume: str | None, remove_old: bool, dry_run: bool,
                  ) -> VolumeChange:
    runtime = app.runtime
    change = plan_change(runtime, app.state, app.project.slug, action, volume, remove_old)
    if dry_run:
        for line in describe(change):
            app.console.result(f"dry-run: would {line}")
        return change
    apply_change(runtime, app.state, change, app.console.result, app.console)
    return change
