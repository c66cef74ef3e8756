"""One snapshot of everything pruning judges: the runtime, the Docker engine, the state files."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from opencode_sandbox.core.prune_plan import (
    DockerImageFact,
    ImageFact,
    Inventory,
    PolicyPieceFact,
    ProjectRecord,
    SandboxFact,
    VolumeFact,
)
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.runtime.base import KeepsPolicyPieces, Runtime
from opencode_sandbox.runtime.types import SandboxInfo
from opencode_sandbox.services.docker_images import DockerImageStore
from opencode_sandbox.state.store import StateStore


def aware(moment: datetime | None) -> datetime | None:
    """Times without a zone are UTC: that is how Docker and msb write them."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def sandbox_fact(info: SandboxInfo) -> SandboxFact:
    return SandboxFact(
        name=info.name,
        active=info.status.is_active,
        image=info.image,
        last_activity_at=aware(info.last_activity_at),
        created_at=aware(info.created_at),
        labels=dict(info.labels),
    )


def gather_inventory(
    runtime: Runtime,
    docker: DockerImageStore | None,
    store: StateStore,
    warn: Callable[[str], None],
    include_images: bool = True,
    include_volumes: Callable[[tuple[SandboxFact, ...]], bool] = lambda _sandboxes: True,
    elsewhere: Runtime | None = None,
    include_policy_pieces: bool = True,
) -> Inventory:
    """Ask each source once. The runtime must answer; the Docker engine may be missing (under
    microsandbox it only holds build caches), which leaves its images out with a warning.
    Volumes are listed only when `include_volumes` says the sandboxes make them matter.
    `elsewhere` is the other runtime installed here: its sandboxes keep their projects' images,
    and when it does not answer, no project counts as having no VM (with a warning).
    `include_policy_pieces` lists what the runtime keeps beside its VMs for their network policy."""
    listed = runtime.list_sandboxes()
    sandboxes = tuple(sandbox_fact(info) for info in listed)
    volumes: tuple[VolumeFact, ...] = ()
    if include_volumes(sandboxes):
        volumes = tuple(VolumeFact(v.name, aware(v.created_at), dict(v.labels)) for v in runtime.list_volumes())
    runtime_images: tuple[ImageFact, ...] = ()
    docker_images: tuple[DockerImageFact, ...] = ()
    proxy_images: tuple[DockerImageFact, ...] = ()
    other_sandboxes: tuple[SandboxFact, ...] | None = ()
    foreign: set[str] = set()
    if include_images:
        runtime_images = tuple(
            ImageFact(i.reference, i.digest, aware(i.created_at), dict(i.labels)) for i in runtime.list_images()
        )
        docker_images_listed = False
        if docker is not None:
            try:
                listed_images = docker.list_images(include_tagged=not runtime.description.runs_engine_images)
                docker_images = tuple(image._replace(created_at=aware(image.created_at)) for image in listed_images)
                docker_images_listed = True
            except SandboxError as error:
                if runtime.description.runs_engine_images:
                    raise
                warn(f"Docker images are left out: {error.message}")
        foreign |= foreign_images(runtime, listed)
        if elsewhere is not None:
            try:
                other_listed = elsewhere.list_sandboxes()
                foreign |= foreign_images(elsewhere, other_listed)
                other_sandboxes = tuple(sandbox_fact(info) for info in other_listed)
            except SandboxError as error:
                warn(f"images of projects without a VM are kept: the {elsewhere.kind.value} runtime's "
                     f"sandboxes cannot be listed: {error.message}")
                other_sandboxes = None
        containers_known = runtime.description.sandboxes_are_engine_containers or (
            elsewhere is not None and other_sandboxes is not None)
        if docker is not None and docker_images_listed and containers_known:
            proxy_images = tuple(image._replace(created_at=aware(image.created_at))
                                 for image in docker.list_proxy_images())
    policy_pieces: tuple[PolicyPieceFact, ...] = ()
    if include_policy_pieces and isinstance(runtime, KeepsPolicyPieces):
        policy_pieces = tuple(piece._replace(created_at=aware(piece.created_at))
                              for piece in runtime.list_policy_pieces())
    projects = {}
    for slug in store.project_slugs():
        state = store.load(slug)
        projects[slug] = ProjectRecord(state.home_volume, state.image_reference, state.image_digest)
    return Inventory(sandboxes, volumes, runtime_images, docker_images, projects, other_sandboxes, frozenset(foreign),
                     proxy_images, policy_pieces, os.getuid())


def foreign_images(runtime: Runtime, ours: Sequence[SandboxInfo]) -> set[str]:
    """The images that sandboxes not of this tool run on."""
    names = {info.name for info in ours}
    return {image for name, image in runtime.sandbox_images().items() if name not in names and image}
