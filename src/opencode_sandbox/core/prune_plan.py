"""What pruning removes: a pure function from one inventory snapshot to a list of removals.

Rules, in the order they are decided:

1. Only this tool's artifacts are considered: a sandbox or volume needs one of our names
   *and* our managed label with a slug label that matches its name; a runner image needs
   the `opencode-sandbox/runner-<slug>` repository *and* our managed label; a dangling
   Docker image needs our managed label. Anything else (a look-alike name without our
   labels, `opencode-sandbox-home` without a slug, foreign images) is never planned.
2. Only projects this user knows are judged: those with a folder in the state folder. The
   sandboxes, volumes and images of any other project (another user's, on a shared Docker
   engine) are never planned, and their sandboxes count as live users of their images. Nor is
   a sandbox, volume or policy piece whose owner label names another host user, whatever
   its project (two users' clones of one remote share its slug); such a sandbox, too, counts
   as a live user of its image.
3. A sandbox is stale when it is not running, starting or draining and its last activity
   (or, lacking that, its creation) is at or before `now - age`. A sandbox with no known
   time at all is never stale. Age 0 makes every sandbox that is not active stale.
4. A project is recent when any of its sandboxes (the project VM or a task sandbox) is not
   stale. A recent project is left alone entirely: its VM, task sandboxes and home volumes
   stay. Otherwise its VM and task sandboxes are pruned.
5. Home volumes go only together with their project's VM pruned in this plan (all of that
   project's home volumes, except one created after `now - age`). A project without a VM
   keeps its volumes: they hold user data. A state file naming a volume that is gone
   changes nothing here.
6. An image that a remaining sandbox or any foreign sandbox or container (on either
   runtime) runs on is never planned.
7. Runner images (in the runtime and in the Docker engine) of a project without a VM after
   this plan, on this runtime and on the other one, go: all of them when the VM is pruned
   in this plan, otherwise those created at or before `now - age` that the project's state
   file does not name as its current image. When the other runtime could not be asked, no
   project counts as having no VM there, so only the images of VMs pruned here go.
8. For a project that keeps a VM (on either runtime), surplus runner images go: images of
   that slug created before the image of every VM of it and at or before `now - age`. The
   image a VM references, even a stopped one, and the state file's current image always
   stay; when a VM's image cannot be found, nothing of that project is surplus.
9. Dangling Docker images with our managed label go when created at or before `now - age`,
   unless a remaining sandbox or a foreign container uses them (a build running right now
   may leave a fresh one for a moment). Untagged, they cannot be any project's current
   image. Tagged base images are never runner images: they stay.
10. The egress proxy's images (docker runtime) go when no container runs on them, stopped
   ones included, and they were created at or before `now - age`: a proxy container is made
   from the current one at every start of its project's VM, so an image no container uses is
   one a tool upgrade or a change of CAs replaced, or one whose projects are gone. They are
   listed only when every container that could use them was listed too.
11. What the docker runtime keeps beside a project's VM for its network policy (the egress
   proxy container, the proxy's CA volume, the project's network) goes when the project is
   known and none of its sandboxes remains after this plan: with its VM pruned here, or, for
   the pieces of a VM removed outside the tool, when they were created at or before
   `now - age` (a run may be making them for a new VM right now). Removing a VM takes these
   pieces too; listing them shows the user all that goes.

Scope narrows what is removed, not how it is judged: `sandboxes` removes stale VMs and task
sandboxes; `volumes` removes the home volumes of stale projects together with their VM
(a VM cannot keep a removed home volume); `images` removes images only, judging projects
whose stale VM stays as live; `all` does everything. The policy pieces of rule 11 go with
`sandboxes` and `all`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType

from opencode_sandbox.core.naming import (
    LABEL_IMAGE,
    LABEL_IMAGE_DIGEST,
    LABEL_MANAGED,
    LABEL_SLUG,
    home_volume_time,
    slug_of_home_volume,
    slug_of_image,
    slug_of_task,
    slug_of_vm,
)
from opencode_sandbox.core.ownership import owned_by_another
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.units import format_duration


class ArtifactKind(StrEnum):
    VM = "vm"
    TASK_SANDBOX = "task sandbox"
    HOME_VOLUME = "home volume"
    RUNTIME_IMAGE = "runtime image"
    DOCKER_IMAGE = "docker image"
    EGRESS_PROXY = "egress proxy"
    NETWORK_HOLDER = "network holder"
    PROXY_CA_VOLUME = "proxy CA volume"
    PROJECT_NETWORK = "project network"


POLICY_PIECES = (ArtifactKind.EGRESS_PROXY, ArtifactKind.NETWORK_HOLDER, ArtifactKind.PROXY_CA_VOLUME,
                 ArtifactKind.PROJECT_NETWORK)
"""What the docker runtime keeps beside a VM for its network policy, in the order they go: the
proxy container uses the volume, and both the proxy and the VM's network holder use the network."""


NO_LABELS: Mapping[str, str] = MappingProxyType({})
NO_PROJECTS: Mapping[str, ProjectRecord] = MappingProxyType({})


class Scope(StrEnum):
    ALL = "all"
    IMAGES = "images"
    VOLUMES = "volumes"
    SANDBOXES = "sandboxes"


class SandboxFact(Record):
    name: str
    active: bool
    """Running, starting or draining: never stale."""
    image: str
    last_activity_at: datetime | None
    created_at: datetime | None = None
    labels: Mapping[str, str] = NO_LABELS


class VolumeFact(Record):
    name: str
    created_at: datetime | None
    labels: Mapping[str, str] = NO_LABELS


class ImageFact(Record):
    """A runner image as the runtime holds it (reference and config digest)."""

    reference: str
    digest: str
    created_at: datetime | None
    labels: Mapping[str, str] = NO_LABELS


class DockerImageFact(Record):
    """An image in the Docker engine: tagged (one fact per tag) or dangling (by ID)."""

    image_id: str
    tag: str | None
    """`None` for a dangling image."""
    created_at: datetime | None
    labels: Mapping[str, str] = NO_LABELS

    @property
    def name(self) -> str:
        return self.tag or self.image_id


class PolicyPieceFact(Record):
    """One of the `POLICY_PIECES` of a project on the docker runtime."""

    kind: ArtifactKind
    name: str
    slug: str
    created_at: datetime | None
    labels: Mapping[str, str] = NO_LABELS


class ProjectRecord(Record):
    """What a project's state file says."""

    home_volume: str | None = None
    image_reference: str | None = None
    image_digest: str | None = None


class Inventory(Record):
    sandboxes: tuple[SandboxFact, ...] = ()
    """This tool's sandboxes on the runtime being pruned."""
    volumes: tuple[VolumeFact, ...] = ()
    runtime_images: tuple[ImageFact, ...] = ()
    docker_images: tuple[DockerImageFact, ...] = ()
    projects: Mapping[str, ProjectRecord] = NO_PROJECTS
    """The projects this user knows, slug -> state file contents (empty when the folder has none)."""
    elsewhere: tuple[SandboxFact, ...] | None = ()
    """This tool's sandboxes on the other runtime installed here, which no plan removes;
    None when that runtime could not be asked."""
    foreign_images: frozenset[str] = frozenset()
    """References and IDs of the images that sandboxes and containers not of this tool run
    on, on either runtime."""
    proxy_images: tuple[DockerImageFact, ...] = ()
    """The egress proxy's images, each tag a fact."""
    policy_pieces: tuple[PolicyPieceFact, ...] = ()
    """This tool's policy pieces on the docker runtime, whose slug label matches their name."""
    owner_uid: int | None = None
    """The host user who prunes: an artifact whose owner label names another is never planned."""

    def of_another(self, labels: Mapping[str, str]) -> bool:
        return self.owner_uid is not None and owned_by_another(labels, self.owner_uid)


class Removal(Record):
    kind: ArtifactKind
    name: str
    reason: str
    slug: str | None = None


def sandbox_slug(sandbox: SandboxFact) -> str | None:
    """The project slug of one of our sandboxes, None for anything else."""
    slug = slug_of_vm(sandbox.name) or slug_of_task(sandbox.name)
    if slug is None or not _labelled(sandbox.labels, slug):
        return None
    return slug


def volume_slug(volume: VolumeFact) -> str | None:
    slug = slug_of_home_volume(volume.name)
    if slug is None or not _labelled(volume.labels, slug):
        return None
    return slug


def image_slug(reference: str, labels: Mapping[str, str]) -> str | None:
    slug = slug_of_image(reference)
    if slug is None or labels.get(LABEL_MANAGED) != "true":
        return None
    return slug


def _labelled(labels: Mapping[str, str], slug: str) -> bool:
    return labels.get(LABEL_MANAGED) == "true" and labels.get(LABEL_SLUG) == slug


def _is_stale(sandbox: SandboxFact, cutoff: datetime) -> bool:
    if sandbox.active:
        return False
    moment = sandbox.last_activity_at or sandbox.created_at
    return moment is not None and moment <= cutoff


def _older(moment: datetime | None, cutoff: datetime) -> bool:
    """Unknown times count as old: an image's age only ever protects it when known."""
    return moment is None or moment <= cutoff


def stale_vm_possible(sandboxes: Iterable[SandboxFact], now: datetime, age: timedelta) -> bool:
    """Whether any project VM could be pruned: when none can, no home volume can go either,
    and the volumes need not be listed at all."""
    cutoff = now - age
    return any(
        slug_of_vm(sandbox.name) and sandbox_slug(sandbox) and _is_stale(sandbox, cutoff) for sandbox in sandboxes
    )


def plan_prune(inventory: Inventory, now: datetime, age: timedelta, scope: Scope = Scope.ALL) -> list[Removal]:
    """The removals for `scope`, sandboxes first, then volumes, runtime and Docker images."""
    cutoff = now - age
    known: set[str] = set()
    vms: dict[str, SandboxFact] = {}
    tasks: dict[str, list[SandboxFact]] = defaultdict(list)
    recent: set[str] = set()
    for sandbox in inventory.sandboxes:
        slug = sandbox_slug(sandbox)
        if slug is None or slug not in inventory.projects or inventory.of_another(sandbox.labels):
            continue
        known.add(slug)
        if slug_of_vm(sandbox.name):
            vms[slug] = sandbox
        else:
            tasks[slug].append(sandbox)
        if not _is_stale(sandbox, cutoff):
            recent.add(slug)

    stale = known - recent
    removes_sandboxes = scope in (Scope.ALL, Scope.SANDBOXES)
    removes_vms = removes_sandboxes or scope is Scope.VOLUMES
    pruned_vms = {slug for slug in stale if slug in vms} if removes_vms else set()

    removals: list[Removal] = []
    for slug in sorted(stale):
        vm = vms.get(slug)
        if vm is not None and slug in pruned_vms:
            removals.append(Removal(ArtifactKind.VM, vm.name, _stale_reason(vm, age), slug))
        if removes_sandboxes:
            for task in sorted(tasks[slug], key=lambda item: item.name):
                removals.append(Removal(ArtifactKind.TASK_SANDBOX, task.name, _stale_reason(task, age), slug))

    if removes_sandboxes:
        removals += _policy_piece_removals(inventory, recent, pruned_vms, cutoff)

    if scope in (Scope.ALL, Scope.VOLUMES):
        mine = [volume for volume in inventory.volumes if not inventory.of_another(volume.labels)]
        removals += _volume_removals(mine, pruned_vms, cutoff)

    if scope in (Scope.ALL, Scope.IMAGES):
        remaining = [
            sandbox
            for sandbox in inventory.sandboxes
            if (slug := sandbox_slug(sandbox)) is not None and not inventory.of_another(sandbox.labels)
            and not (slug in stale and (removes_sandboxes or (slug in pruned_vms and slug_of_vm(sandbox.name))))
        ]
        remaining += [sandbox for sandbox in inventory.elsewhere or () if sandbox_slug(sandbox) is not None]
        judge = _ImageJudge(inventory, remaining, pruned_vms, cutoff)
        for image in sorted(inventory.runtime_images, key=lambda item: item.reference):
            verdict = judge.verdict(image.reference, image.digest, image.created_at, image.labels)
            if verdict is not None:
                removals.append(Removal(ArtifactKind.RUNTIME_IMAGE, image.reference, *verdict))
        for tagged in sorted(inventory.docker_images, key=lambda item: item.name):
            if tagged.tag is None:
                verdict = judge.dangling_verdict(tagged)
            else:
                verdict = judge.verdict(tagged.tag, tagged.image_id, tagged.created_at, tagged.labels)
            if verdict is not None:
                removals.append(Removal(ArtifactKind.DOCKER_IMAGE, tagged.name, *verdict))
        for proxy in sorted(inventory.proxy_images, key=lambda item: item.name):
            if judge.unused(proxy):
                removals.append(Removal(ArtifactKind.DOCKER_IMAGE, proxy.name, "no egress proxy runs on it"))
    return removals


def _stale_reason(sandbox: SandboxFact, age: timedelta) -> str:
    if age <= timedelta(0):
        return "not running"
    return f"not active for more than {format_duration(age)}"


def _volume_removals(volumes: Iterable[VolumeFact], pruned_vms: set[str], cutoff: datetime) -> list[Removal]:
    removals: list[Removal] = []
    for volume in sorted(volumes, key=lambda item: item.name):
        slug = volume_slug(volume)
        if slug is None or slug not in pruned_vms:
            continue
        created = volume.created_at or home_volume_time(volume.name)
        if created is not None and created > cutoff:
            continue
        removals.append(Removal(ArtifactKind.HOME_VOLUME, volume.name, "its project's VM is pruned", slug))
    return removals


def _policy_piece_removals(
    inventory: Inventory, recent: set[str], pruned_vms: set[str], cutoff: datetime
) -> list[Removal]:
    removals: list[Removal] = []
    order = {kind: index for index, kind in enumerate(POLICY_PIECES)}
    for piece in sorted(inventory.policy_pieces, key=lambda item: (item.slug, order[item.kind], item.name)):
        if piece.slug not in inventory.projects or piece.slug in recent or inventory.of_another(piece.labels):
            continue
        if piece.slug in pruned_vms:
            removals.append(Removal(piece.kind, piece.name, "its project's VM is pruned", piece.slug))
        elif _older(piece.created_at, cutoff):
            removals.append(Removal(piece.kind, piece.name, "its project has no VM", piece.slug))
    return removals


class _ImageJudge:
    """Decides runner images against the sandboxes that remain after this plan."""

    def __init__(
        self, inventory: Inventory, remaining: list[SandboxFact], pruned_vms: set[str], cutoff: datetime
    ) -> None:
        self.cutoff = cutoff
        self.pruned_vms = pruned_vms
        self.projects = inventory.projects
        self.vms_everywhere_known = inventory.elsewhere is not None
        self.referenced: set[str] = set(inventory.foreign_images)
        for sandbox in inventory.sandboxes:
            if inventory.of_another(sandbox.labels):
                self.referenced |= _references_of(sandbox)
        self.live_vms: dict[str, list[SandboxFact]] = defaultdict(list)
        for sandbox in remaining:
            self.referenced |= _references_of(sandbox)
            slug = slug_of_vm(sandbox.name)
            if slug is not None:
                self.live_vms[slug].append(sandbox)
        self.created: dict[str, datetime] = {}
        for image in inventory.runtime_images:
            self._remember(image.created_at, image.reference, image.digest)
        for docker_image in inventory.docker_images:
            self._remember(docker_image.created_at, docker_image.tag, docker_image.image_id)

    def _remember(self, created: datetime | None, *keys: str | None) -> None:
        if created is None:
            return
        for key in keys:
            if key:
                self.created.setdefault(key, created)

    def _image_created(self, vm: SandboxFact) -> datetime | None:
        for key in (vm.image, vm.labels.get(LABEL_IMAGE), vm.labels.get(LABEL_IMAGE_DIGEST)):
            if key and key in self.created:
                return self.created[key]
        return None

    def _oldest_vm_image(self, vms: list[SandboxFact]) -> datetime | None:
        """When the oldest image a VM of the project runs on was created; None when one is unknown."""
        moments = [self._image_created(vm) for vm in vms]
        known = [moment for moment in moments if moment is not None]
        return min(known) if known and len(known) == len(moments) else None

    def verdict(
        self, reference: str, digest: str, created: datetime | None, labels: Mapping[str, str]
    ) -> tuple[str, str | None] | None:
        """Why the image goes and its project, or None when it stays."""
        slug = image_slug(reference, labels)
        if slug is None or slug not in self.projects:
            return None
        if reference in self.referenced or (digest and digest in self.referenced):
            return None
        is_current = reference == self.projects[slug].image_reference
        vms = self.live_vms.get(slug)
        if not vms:
            if slug in self.pruned_vms:
                return "its project's VM is pruned", slug
            if not self.vms_everywhere_known or is_current or not _older(created, self.cutoff):
                return None
            return "its project has no VM", slug
        if is_current or not _older(created, self.cutoff):
            return None
        current = self._oldest_vm_image(vms)
        if current is None or created is None or created >= current:
            return None
        return "older than the image of its project's VM", slug

    def dangling_verdict(self, image: DockerImageFact) -> tuple[str, str | None] | None:
        return ("dangling (untagged by a rebuild)", None) if self.unused(image) else None

    def unused(self, image: DockerImageFact) -> bool:
        """Ours, used by no container (by tag or ID), and old enough."""
        if image.labels.get(LABEL_MANAGED) != "true" or image.image_id in self.referenced:
            return False
        return image.tag not in self.referenced and _older(image.created_at, self.cutoff)


def _references_of(sandbox: SandboxFact) -> set[str]:
    keys = {sandbox.image, sandbox.labels.get(LABEL_IMAGE, ""), sandbox.labels.get(LABEL_IMAGE_DIGEST, "")}
    return {key for key in keys if key}
