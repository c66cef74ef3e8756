"""Pruning: take one inventory, plan, show, confirm, then remove one artifact at a time.

Every removal tolerates the artifact vanishing meanwhile (it counts as gone) and a failure
is a warning, never the end of the run. A sandbox is looked at once more right before its
removal: one that became active since the snapshot is left alone.

Summary counts: VMs include task sandboxes; under the docker runtime the runner images are
Docker images and the msb count is always 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.prune_plan import (
    POLICY_PIECES,
    ArtifactKind,
    Removal,
    Scope,
    plan_prune,
    stale_vm_possible,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.units import format_duration, parse_duration
from opencode_sandbox.errors import NotFound, SandboxError, UsageError
from opencode_sandbox.runtime.base import KeepsPolicyPieces, Runtime
from opencode_sandbox.services.docker_images import DockerEngineImages, DockerImageStore
from opencode_sandbox.services.inventory import gather_inventory
from opencode_sandbox.state.store import StateStore
from opencode_sandbox.ui.console import Console

if TYPE_CHECKING:
    from opencode_sandbox.app import App
    from opencode_sandbox.runtime.description import Description


class PruneOutcome(Record):
    plan: list[Removal]
    removed: list[Removal]
    failed: list[tuple[Removal, str]]


class Counts(Record):
    vms: int = 0
    home_volumes: int = 0
    docker_images: int = 0
    msb_images: int = 0


def count(removals: Sequence[Removal], runtime: Description) -> Counts:
    kinds = [removal.kind for removal in removals]
    runtime_images = kinds.count(ArtifactKind.RUNTIME_IMAGE)
    docker_images = kinds.count(ArtifactKind.DOCKER_IMAGE)
    if runtime.runs_engine_images:
        docker_images, runtime_images = docker_images + runtime_images, 0
    return Counts(
        vms=kinds.count(ArtifactKind.VM) + kinds.count(ArtifactKind.TASK_SANDBOX),
        home_volumes=kinds.count(ArtifactKind.HOME_VOLUME),
        docker_images=docker_images,
        msb_images=runtime_images,
    )


def summary_line(counts: Counts, dry_run: bool) -> str:
    numbers = (
        f"{counts.vms} VMs, {counts.home_volumes} home volumes, "
        f"{counts.docker_images} docker images, {counts.msb_images} msb images"
    )
    return f"dry-run: Would prune {numbers}" if dry_run else f"Pruned {numbers}"


def plan_lines(plan: Sequence[Removal], runtime: Description) -> list[str]:
    if not plan:
        return ["Nothing to prune."]
    labels = [_kind_label(removal.kind, runtime) for removal in plan]
    width = max(len(label) for label in labels)
    name_width = max(len(removal.name) for removal in plan)
    return [
        f"  {label:<{width}}  {removal.name:<{name_width}}  ({removal.reason})"
        for label, removal in zip(labels, plan, strict=True)
    ]


def _kind_label(kind: ArtifactKind, runtime: Description) -> str:
    if kind is ArtifactKind.RUNTIME_IMAGE:
        return runtime.image_label
    return kind.value


def remove_one(runtime: Runtime, docker: DockerImageStore | None, removal: Removal) -> bool:
    """Remove one planned artifact; False when it was already gone."""
    try:
        if removal.kind in (ArtifactKind.VM, ArtifactKind.TASK_SANDBOX):
            info = runtime.get_sandbox(removal.name)
            if info is None:
                return False
            if info.status.is_active:
                raise SandboxError(f"{removal.name} became active; left alone", hint=None)
            runtime.remove_sandbox(removal.name)
        elif removal.kind is ArtifactKind.HOME_VOLUME:
            runtime.remove_volume(removal.name)
        elif removal.kind is ArtifactKind.RUNTIME_IMAGE:
            runtime.remove_image(removal.name)
        elif removal.kind in POLICY_PIECES:
            if not isinstance(runtime, KeepsPolicyPieces):
                raise SandboxError(f"the {runtime.kind.value} runtime keeps no {removal.kind.value}", hint=None)
            runtime.remove_policy_piece(removal.kind, removal.name)
        elif docker is not None:
            docker.remove(removal.name)
    except NotFound:
        return False
    return True


def apply_plan(
    plan: Sequence[Removal],
    runtime: Runtime,
    docker: DockerImageStore | None,
    store: StateStore,
    warn: Callable[[str], None],
) -> PruneOutcome:
    outcome = PruneOutcome(list(plan), [], [])
    for removal in plan:
        try:
            remove_one(runtime, docker, removal)
        except SandboxError as error:
            warn(f"could not remove {removal.kind.value} {removal.name}: {error.message}")
            outcome.failed.append((removal, error.message))
            continue
        outcome.removed.append(removal)
    _forget_pruned_projects(outcome.removed, store)
    return outcome


def _forget_pruned_projects(removed: Sequence[Removal], store: StateStore) -> None:
    """A project whose VM and current home volume are both gone starts afresh next time."""
    vms = {removal.slug for removal in removed if removal.kind is ArtifactKind.VM}
    volumes = {removal.name for removal in removed if removal.kind is ArtifactKind.HOME_VOLUME}
    for slug in sorted(slug for slug in vms if slug):
        if not store.state_path(slug).is_file():
            continue
        if store.load(slug).home_volume in volumes:
            store.remove(slug)


def resolve_age(text: str | None, default: timedelta) -> timedelta:
    if text is None:
        return default
    try:
        return parse_duration(text)
    except ValueError as error:
        raise UsageError(f"invalid --age: {error}", hint="write an age such as 30d, 24h, 90m or 45s") from None


def prune(app: App, age_text: str | None, scope: Scope, dry_run: bool, force: bool,
          docker: DockerImageStore | None = None) -> PruneOutcome:
    """`prune` and its per-kind variants. Raises `SandboxError` when some removal failed."""
    say = app.console.result
    age = resolve_age(age_text, app.settings.manual_prune_age)
    runtime = app.runtime
    store = docker if docker is not None else DockerEngineImages(app.image_engine)
    now = datetime.now(UTC)
    inventory = gather_inventory(
        runtime, store, app.state, app.console.warn,
        include_images=scope in (Scope.ALL, Scope.IMAGES),
        include_volumes=lambda sandboxes: scope in (Scope.ALL, Scope.VOLUMES)
        and stale_vm_possible(sandboxes, now, age),
        elsewhere=app.other_runtime if scope in (Scope.ALL, Scope.IMAGES) else None,
        include_policy_pieces=scope in (Scope.ALL, Scope.SANDBOXES),
    )
    plan = plan_prune(inventory, now, age, scope)
    if plan:
        say(f"{'Would prune' if dry_run else 'To prune'} (unused for more than {format_duration(age)}):")
    for line in plan_lines(plan, runtime.description):
        say(line)
    if dry_run or not plan:
        say(summary_line(count(plan, runtime.description), dry_run))
        return PruneOutcome(plan, [], [])
    if not force and not _confirmed(app, len(plan)):
        say("Nothing removed.")
        return PruneOutcome(plan, [], [])
    outcome = apply_plan(plan, runtime, store, app.state, app.console.warn)
    say(summary_line(count(outcome.removed, runtime.description), dry_run=False))
    if outcome.failed:
        raise SandboxError(
            f"{len(outcome.failed)} of {len(plan)} removals failed (see the warnings above)",
            hint="fix what the warnings name, then run the prune again",
        )
    return outcome


def _confirmed(app: App, total: int) -> bool:
    from opencode_sandbox.ui.prompts import confirm

    if not app.interactive:
        raise UsageError(
            "pruning asks for a confirmation, and there is no terminal to answer it"
            if not app.assume_yes
            else "pruning is not confirmed by --yes (its default answer is no)",
            hint="add --force to remove without asking, or --dry-run to only see the plan",
        )
    return confirm(app.console, f"Remove these {total} artifacts?", default=False, interactive=True)


class _Once:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False

    def claim(self) -> bool:
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True


_auto_prune_once = _Once()


def auto_prune(app: App) -> PruneOutcome | None:
    """Before run and shell, at most once per process; warns instead of failing."""
    if not _auto_prune_once.claim():
        return None
    try:
        return auto_prune_now(app.runtime, DockerEngineImages(app.image_engine), app.state, app.settings.auto_prune_age,
                              app.console, elsewhere=app.other_runtime)
    except Exception as error:  # a failed prune must never keep the user from their VM
        message = error.message if isinstance(error, SandboxError) else f"{type(error).__name__}: {error}"
        app.console.warn(f"auto-prune skipped: {message}")
        return None


def auto_prune_now(
    runtime: Runtime,
    docker: DockerImageStore | None,
    store: StateStore,
    age: timedelta,
    console: Console,
    now: datetime | None = None,
    elsewhere: Runtime | None = None,
) -> PruneOutcome | None:
    """Prune without asking. An age of 0 turns auto-pruning off (it would prune every VM
    that is not running, on every start)."""
    if age <= timedelta(0):
        return None
    moment = now or datetime.now(UTC)
    inventory = gather_inventory(
        runtime, docker, store, console.warn,
        include_volumes=lambda sandboxes: stale_vm_possible(sandboxes, moment, age),
        elsewhere=elsewhere,
    )
    plan = plan_prune(inventory, moment, age, Scope.ALL)
    if not plan:
        return PruneOutcome(plan, [], [])
    for line in plan_lines(plan, runtime.description):
        console.verbose("auto-prune:" + line)
    outcome = apply_plan(plan, runtime, docker, store, console.warn)
    console.info(f"auto-prune: {summary_line(count(outcome.removed, runtime.description), dry_run=False)}")
    return outcome
