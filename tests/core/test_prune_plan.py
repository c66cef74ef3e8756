"""The prune planner over hand-built inventories: every rule, and what each keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_sandbox.core.naming import (
    KIND_PROXY,
    LABEL_IMAGE_DIGEST,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_SLUG,
    PROXY_REPOSITORY,
    home_volume_name,
    managed_labels,
    owner_labels,
    runner_image,
    task_name,
    vm_name,
)
from opencode_sandbox.core.prune_plan import (
    POLICY_PIECES,
    ArtifactKind,
    DockerImageFact,
    ImageFact,
    Inventory,
    PolicyPieceFact,
    ProjectRecord,
    Removal,
    SandboxFact,
    Scope,
    VolumeFact,
    plan_prune,
    sandbox_slug,
    stale_vm_possible,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
AGE = timedelta(days=7)
OLD = NOW - timedelta(days=30)
RECENT = NOW - timedelta(days=1)
SLUG_A = "alpha-0123456789abcd"
SLUG_B = "beta-abcdefghijklmn"
SLUG_C = "gamma-zyxwvutsrqponm"
OURS = {LABEL_MANAGED: "true"}
KNOWN = {slug: ProjectRecord() for slug in (SLUG_A, SLUG_B, SLUG_C)}
"""Every project these tests plant is one this user knows, unless a test says otherwise."""


def vm(slug: str, *, when: datetime | None = OLD, active: bool = False, image: str = "",
       labels: dict[str, str] | None = None) -> SandboxFact:
    return SandboxFact(vm_name(slug), active, image, when, when, labels if labels is not None else managed_labels(slug))


def task(slug: str, number: int, *, when: datetime = OLD, active: bool = False) -> SandboxFact:
    return SandboxFact(task_name(slug, number), active, "", when, when, managed_labels(slug))


def volume(slug: str, created: datetime = OLD, labels: dict[str, str] | None = None) -> VolumeFact:
    return VolumeFact(home_volume_name(slug, created), created, labels if labels is not None else managed_labels(slug))


def image(slug: str, tag: str, created: datetime = OLD, labels: dict[str, str] | None = None) -> ImageFact:
    return ImageFact(runner_image(slug, tag), "sha256:" + tag.ljust(64, "0"), created,
                     labels if labels is not None else OURS)


def docker_tag(slug: str, tag: str, created: datetime = OLD) -> DockerImageFact:
    return DockerImageFact("sha256:" + tag.ljust(64, "0"), runner_image(slug, tag), created, OURS)


def dangling(hexdigits: str, created: datetime = OLD, labels: dict[str, str] | None = None) -> DockerImageFact:
    return DockerImageFact("sha256:" + hexdigits.ljust(64, "0"), None, created, labels if labels is not None else OURS)


def pieces(slug: str, created: datetime | None = OLD) -> tuple[PolicyPieceFact, ...]:
    """One of each, in the reverse of the order they go."""
    return tuple(PolicyPieceFact(kind, f"{kind.name.lower()}-{slug}", slug, created)
                 for kind in reversed(POLICY_PIECES))


def names(removals: list[Removal], kind: ArtifactKind | None = None) -> set[str]:
    return {removal.name for removal in removals if kind is None or removal.kind is kind}


def plan(inventory: Inventory, age: timedelta = AGE, scope: Scope = Scope.ALL) -> list[Removal]:
    return plan_prune(inventory, NOW, age, scope)


def test_empty_inventory_plans_nothing() -> None:
    assert plan(Inventory(projects=KNOWN)) == []


def test_a_stale_vm_goes_with_its_volumes_and_images() -> None:
    current = image(SLUG_A, "aaa")
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, image=current.reference),),
        volumes=(volume(SLUG_A), volume(SLUG_A, OLD - timedelta(days=3))),
        runtime_images=(current, image(SLUG_A, "bbb")),
        docker_images=(docker_tag(SLUG_A, "aaa"),),
        projects={**KNOWN, SLUG_A: ProjectRecord(home_volume=volume(SLUG_A).name, image_reference=current.reference)},
    )
    removals = plan(inventory)
    assert [(r.kind, r.name) for r in removals] == [
        (ArtifactKind.VM, vm_name(SLUG_A)),
        (ArtifactKind.HOME_VOLUME, volume(SLUG_A, OLD - timedelta(days=3)).name),
        (ArtifactKind.HOME_VOLUME, volume(SLUG_A).name),
        (ArtifactKind.RUNTIME_IMAGE, runner_image(SLUG_A, "aaa")),
        (ArtifactKind.RUNTIME_IMAGE, runner_image(SLUG_A, "bbb")),
        (ArtifactKind.DOCKER_IMAGE, runner_image(SLUG_A, "aaa")),
    ]
    assert all(r.slug == SLUG_A for r in removals)
    assert removals[0].reason == "not active for more than 7d"
    assert removals[1].reason == "its project's VM is pruned"


def test_an_active_vm_is_never_stale_however_old() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=OLD - timedelta(days=900), active=True),),
                          volumes=(volume(SLUG_A),), projects=KNOWN)
    assert plan(inventory, age=timedelta(0)) == []


def test_a_project_with_recent_activity_is_left_alone_entirely() -> None:
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, when=RECENT), task(SLUG_A, 1)),
        volumes=(volume(SLUG_A), volume(SLUG_A, OLD - timedelta(days=60))),
        projects=KNOWN,
    )
    assert plan(inventory) == []


def test_a_recent_task_sandbox_keeps_the_whole_project() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_A), task(SLUG_A, 1, when=RECENT)), volumes=(volume(SLUG_A),),
                          projects=KNOWN)
    assert plan(inventory) == []


def test_stale_task_sandboxes_count_with_the_vms() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_A), task(SLUG_A, 1), task(SLUG_A, 2), task(SLUG_B, 1)), projects=KNOWN)
    removals = plan(inventory)
    assert names(removals, ArtifactKind.VM) == {vm_name(SLUG_A)}
    assert names(removals, ArtifactKind.TASK_SANDBOX) == {task_name(SLUG_A, 1), task_name(SLUG_A, 2),
                                                         task_name(SLUG_B, 1)}


def test_the_age_boundary_is_inclusive() -> None:
    on_the_line = vm(SLUG_A, when=NOW - AGE)
    just_inside = vm(SLUG_B, when=NOW - AGE + timedelta(seconds=1))
    removals = plan(Inventory(sandboxes=(on_the_line, just_inside), projects=KNOWN))
    assert names(removals) == {vm_name(SLUG_A)}


def test_age_zero_makes_every_sandbox_that_is_not_active_stale() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=NOW), vm(SLUG_B, when=NOW, active=True)), projects=KNOWN)
    removals = plan(inventory, age=timedelta(0))
    assert names(removals) == {vm_name(SLUG_A)}
    assert removals[0].reason == "not running"


def test_a_sandbox_without_any_time_is_kept() -> None:
    assert plan(Inventory(sandboxes=(vm(SLUG_A, when=None),), projects=KNOWN), age=timedelta(0)) == []


def test_home_volumes_of_a_project_without_a_vm_are_never_pruned() -> None:
    inventory = Inventory(
        volumes=(volume(SLUG_A), volume(SLUG_B, OLD - timedelta(days=365))),
        projects={**KNOWN, SLUG_A: ProjectRecord(home_volume=volume(SLUG_A).name)},
    )
    assert plan(inventory, age=timedelta(0)) == []


def test_a_home_volume_created_within_the_age_stays_with_a_pruned_vm() -> None:
    fresh = volume(SLUG_A, RECENT)
    inventory = Inventory(sandboxes=(vm(SLUG_A),), volumes=(volume(SLUG_A), fresh), projects=KNOWN)
    removals = plan(inventory)
    assert names(removals, ArtifactKind.HOME_VOLUME) == {volume(SLUG_A).name}


def test_a_state_file_naming_a_volume_that_is_gone_changes_nothing() -> None:
    inventory = Inventory(
        sandboxes=(vm(SLUG_A),),
        volumes=(volume(SLUG_A),),
        projects={**KNOWN, SLUG_A: ProjectRecord(home_volume=home_volume_name(SLUG_A, OLD - timedelta(days=99)))},
    )
    removals = plan(inventory)
    assert [(r.kind, r.name) for r in removals] == [
        (ArtifactKind.VM, vm_name(SLUG_A)),
        (ArtifactKind.HOME_VOLUME, volume(SLUG_A).name),
    ]


def test_runner_images_of_a_project_without_a_vm_go_once_older_than_the_age() -> None:
    inventory = Inventory(
        runtime_images=(image(SLUG_B, "old"), image(SLUG_B, "new", RECENT)),
        docker_images=(docker_tag(SLUG_B, "old"), docker_tag(SLUG_B, "new", RECENT)),
        projects=KNOWN,
    )
    removals = plan(inventory)
    assert [(r.kind, r.name, r.reason) for r in removals] == [
        (ArtifactKind.RUNTIME_IMAGE, runner_image(SLUG_B, "old"), "its project has no VM"),
        (ArtifactKind.DOCKER_IMAGE, runner_image(SLUG_B, "old"), "its project has no VM"),
    ]


def test_the_current_image_in_a_state_file_stays_for_a_project_without_a_vm() -> None:
    inventory = Inventory(
        runtime_images=(image(SLUG_B, "cur"), image(SLUG_B, "old", OLD - timedelta(days=1))),
        projects={**KNOWN, SLUG_B: ProjectRecord(image_reference=runner_image(SLUG_B, "cur"))},
    )
    assert names(plan(inventory)) == {runner_image(SLUG_B, "old")}


def test_a_pruned_vm_takes_even_fresh_and_current_images_along() -> None:
    fresh = image(SLUG_A, "fresh", RECENT)
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, image=fresh.reference),),
        runtime_images=(fresh,),
        projects={**KNOWN, SLUG_A: ProjectRecord(image_reference=fresh.reference)},
    )
    assert names(plan(inventory), ArtifactKind.RUNTIME_IMAGE) == {fresh.reference}


def test_surplus_images_of_a_live_project_are_those_older_than_the_vms_image() -> None:
    current = image(SLUG_A, "cur", OLD)
    older = image(SLUG_A, "older", OLD - timedelta(days=5))
    newer = image(SLUG_A, "newer", OLD + timedelta(days=1))
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, when=RECENT, image=current.reference),),
        runtime_images=(current, older, newer),
        docker_images=(docker_tag(SLUG_A, "older", OLD - timedelta(days=5)),),
        projects=KNOWN,
    )
    removals = plan(inventory)
    assert [(r.kind, r.name, r.reason) for r in removals] == [
        (ArtifactKind.RUNTIME_IMAGE, older.reference, "older than the image of its project's VM"),
        (ArtifactKind.DOCKER_IMAGE, older.reference, "older than the image of its project's VM"),
    ]


def test_surplus_images_younger_than_the_age_stay() -> None:
    current = image(SLUG_A, "cur", NOW - timedelta(hours=1))
    older = image(SLUG_A, "older", RECENT)
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=RECENT, image=current.reference),),
                          runtime_images=(current, older), projects=KNOWN)
    assert plan(inventory) == []


def test_the_image_a_stopped_vm_references_is_kept_even_when_older_than_the_current_one() -> None:
    booted = image(SLUG_A, "booted", OLD - timedelta(days=10))
    rebuilt = image(SLUG_A, "rebuilt", OLD)
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, when=RECENT, image=booted.reference),),
        runtime_images=(booted, rebuilt),
        projects={**KNOWN, SLUG_A: ProjectRecord(image_reference=rebuilt.reference)},
    )
    assert plan(inventory) == []


def test_an_image_referenced_by_digest_label_is_kept() -> None:
    current = image(SLUG_A, "cur")
    older = image(SLUG_A, "older", OLD - timedelta(days=3))
    labels = {**managed_labels(SLUG_A), LABEL_IMAGE_DIGEST: older.digest}
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=RECENT, image=current.reference, labels=labels),),
                          runtime_images=(current, older), projects=KNOWN)
    assert plan(inventory) == []


def test_when_the_vms_image_is_unknown_nothing_of_that_project_is_surplus() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=RECENT, image="somewhere/else:1"),),
                          runtime_images=(image(SLUG_A, "x"), image(SLUG_A, "y", OLD - timedelta(days=9))),
                          projects=KNOWN)
    assert plan(inventory) == []


def test_dangling_docker_images_of_this_tool_go_foreign_ones_stay() -> None:
    inventory = Inventory(docker_images=(
        dangling("aa"),
        dangling("bb", labels={"maintainer": "someone"}),
        dangling("cc", labels={LABEL_MANAGED: "false"}),
        dangling("dd", created=RECENT),
    ), projects=KNOWN)
    removals = plan(inventory)
    assert [(r.kind, r.name) for r in removals] == [(ArtifactKind.DOCKER_IMAGE, "sha256:" + "aa".ljust(64, "0"))]
    assert removals[0].slug is None


def test_a_dangling_image_a_remaining_vm_runs_on_stays() -> None:
    image_id = "sha256:" + "ee".ljust(64, "0")
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=RECENT, image=image_id),), docker_images=(dangling("ee"),),
                          projects=KNOWN)
    assert plan(inventory) == []


def test_egress_proxy_images_no_container_runs_on_go_once_old_enough() -> None:
    proxy_labels = {LABEL_MANAGED: "true", LABEL_KIND: KIND_PROXY}
    unused = DockerImageFact("sha256:" + "1" * 64, f"{PROXY_REPOSITORY}:0ld", OLD, proxy_labels)
    by_tag = DockerImageFact("sha256:" + "2" * 64, f"{PROXY_REPOSITORY}:running", OLD, proxy_labels)
    by_id = DockerImageFact("sha256:" + "3" * 64, f"{PROXY_REPOSITORY}:retagged", OLD, proxy_labels)
    fresh = DockerImageFact("sha256:" + "4" * 64, f"{PROXY_REPOSITORY}:fresh", RECENT, proxy_labels)
    unlabelled = DockerImageFact("sha256:" + "5" * 64, f"{PROXY_REPOSITORY}:theirs", OLD, {})
    inventory = Inventory(proxy_images=(unused, by_tag, by_id, fresh, unlabelled), projects=KNOWN,
                          foreign_images=frozenset({by_tag.name, by_id.image_id}))
    removals = plan(inventory)
    assert [(r.kind, r.name, r.reason) for r in removals] == [
        (ArtifactKind.DOCKER_IMAGE, unused.name, "no egress proxy runs on it")]
    assert plan(inventory, scope=Scope.SANDBOXES) == [] and plan(inventory, scope=Scope.VOLUMES) == []
    assert [r.name for r in plan(inventory, scope=Scope.IMAGES)] == [unused.name]


def test_policy_pieces_of_a_vm_removed_outside_the_tool_go_once_old_enough() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_C, when=RECENT, active=True),),
                          policy_pieces=pieces(SLUG_A) + pieces(SLUG_B, RECENT) + pieces(SLUG_C), projects=KNOWN)
    removals = plan(inventory)
    assert [(r.kind, r.name, r.reason, r.slug) for r in removals] == [
        (kind, f"{kind.name.lower()}-{SLUG_A}", "its project has no VM", SLUG_A) for kind in POLICY_PIECES]
    assert [r.kind for r in plan(inventory, scope=Scope.SANDBOXES)] == list(POLICY_PIECES)
    assert plan(inventory, scope=Scope.IMAGES) == [] and plan(inventory, scope=Scope.VOLUMES) == []
    assert [r.name for r in plan(inventory, age=timedelta(0))] == [
        f"{kind.name.lower()}-{slug}" for slug in (SLUG_A, SLUG_B) for kind in POLICY_PIECES]


def test_another_host_users_artifacts_of_a_known_project_are_never_planned() -> None:
    """Two users' clones of one remote share the slug: the owner label keeps the other's apart."""
    theirs = {**managed_labels(SLUG_A), **owner_labels(0)}
    their_image = image(SLUG_A, "aaa")
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, image=their_image.reference, labels=theirs),),
        volumes=(volume(SLUG_A, labels=theirs),),
        runtime_images=(their_image, image(SLUG_A, "bbb")),
        policy_pieces=tuple(piece._replace(labels=theirs) for piece in pieces(SLUG_A)),
        projects=KNOWN,
        owner_uid=1001,
    )
    removals = plan(inventory, age=timedelta(0))
    assert names(removals) == {runner_image(SLUG_A, "bbb")}, "their VM's image stays, as any image in use"
    assert [r.reason for r in removals] == ["its project has no VM"]
    mine = {**managed_labels(SLUG_A), **owner_labels(1001)}
    own = inventory._replace(sandboxes=(vm(SLUG_A, image=their_image.reference, labels=mine),),
                             volumes=(volume(SLUG_A, labels=mine),))
    assert {ArtifactKind.VM, ArtifactKind.HOME_VOLUME} <= {r.kind for r in plan(own, age=timedelta(0))}


def test_without_an_owner_uid_the_labels_decide_nothing() -> None:
    theirs = {**managed_labels(SLUG_A), **owner_labels(0)}
    inventory = Inventory(sandboxes=(vm(SLUG_A, labels=theirs),), projects=KNOWN)
    assert names(plan(inventory)) == {vm_name(SLUG_A)}


def test_policy_pieces_of_a_pruned_vm_are_listed_with_it_however_young() -> None:
    inventory = Inventory(sandboxes=(vm(SLUG_A),), policy_pieces=pieces(SLUG_A, RECENT), projects=KNOWN)
    removals = plan(inventory)
    assert [(r.kind, r.reason) for r in removals] == [(ArtifactKind.VM, "not active for more than 7d")] + [
        (kind, "its project's VM is pruned") for kind in POLICY_PIECES]


def test_policy_pieces_stay_beside_a_live_task_and_for_an_unknown_project() -> None:
    inventory = Inventory(sandboxes=(task(SLUG_A, 1, when=RECENT),), policy_pieces=pieces(SLUG_A) + pieces(SLUG_B),
                          projects={SLUG_A: ProjectRecord()})
    assert plan(inventory) == []


def test_base_images_and_foreign_images_are_never_planned() -> None:
    base = ImageFact("opencode-sandbox/runner-base:latest", "sha256:1", OLD, OURS)
    dind = DockerImageFact("sha256:2", "opencode-sandbox/runner-base-dind:latest", OLD, OURS)
    unlabelled = image(SLUG_C, "nolabel", labels={})
    foreign_repo = ImageFact("someone/runner-" + SLUG_C + ":x", "sha256:3", OLD, OURS)
    inventory = Inventory(runtime_images=(base, unlabelled, foreign_repo), docker_images=(dind,), projects=KNOWN)
    assert plan(inventory, age=timedelta(0)) == []


def test_look_alike_names_and_foreign_labels_are_never_planned() -> None:
    inventory = Inventory(
        sandboxes=(
            vm(SLUG_A, labels={}),  # our name, no labels
            vm(SLUG_B, labels={LABEL_MANAGED: "true", LABEL_SLUG: SLUG_C}),  # slug label of another project
            SandboxFact("opencode-sandbox-vm-x", False, "", OLD, OLD, OURS),  # no valid slug
            SandboxFact("other-vm", False, "", OLD, OLD, OURS),
        ),
        volumes=(
            VolumeFact("opencode-sandbox-home", OLD, OURS),
            VolumeFact("opencode-sandbox-home-" + SLUG_A, OLD, managed_labels(SLUG_A)),  # no timestamp
            volume(SLUG_A, labels={}),
        ),
        projects=KNOWN,
    )
    assert plan(inventory, age=timedelta(0)) == []


def test_sandbox_scope_removes_vms_and_tasks_only() -> None:
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, image=runner_image(SLUG_A, "a")), task(SLUG_A, 3)),
        volumes=(volume(SLUG_A),),
        runtime_images=(image(SLUG_A, "a"),),
        docker_images=(dangling("ab"),),
        projects=KNOWN,
    )
    removals = plan(inventory, scope=Scope.SANDBOXES)
    assert [(r.kind, r.name) for r in removals] == [
        (ArtifactKind.VM, vm_name(SLUG_A)),
        (ArtifactKind.TASK_SANDBOX, task_name(SLUG_A, 3)),
    ]


def test_volume_scope_takes_the_stale_vm_along_but_no_task_or_image() -> None:
    inventory = Inventory(
        sandboxes=(vm(SLUG_A), task(SLUG_A, 3), task(SLUG_B, 1)),
        volumes=(volume(SLUG_A), volume(SLUG_B)),
        runtime_images=(image(SLUG_A, "a"),),
        projects=KNOWN,
    )
    removals = plan(inventory, scope=Scope.VOLUMES)
    assert [(r.kind, r.name) for r in removals] == [
        (ArtifactKind.VM, vm_name(SLUG_A)),
        (ArtifactKind.HOME_VOLUME, volume(SLUG_A).name),
    ]


def test_image_scope_judges_a_stale_vm_that_stays_as_live() -> None:
    current = image(SLUG_A, "cur", OLD)
    older = image(SLUG_A, "older", OLD - timedelta(days=2))
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, image=current.reference),),
        volumes=(volume(SLUG_A),),
        runtime_images=(current, older, image(SLUG_B, "gone")),
        docker_images=(dangling("ff"),),
        projects=KNOWN,
    )
    removals = plan(inventory, scope=Scope.IMAGES)
    assert [(r.kind, r.name) for r in removals] == [
        (ArtifactKind.RUNTIME_IMAGE, older.reference),
        (ArtifactKind.RUNTIME_IMAGE, runner_image(SLUG_B, "gone")),
        (ArtifactKind.DOCKER_IMAGE, "sha256:" + "ff".ljust(64, "0")),
    ]


def test_volumes_matter_only_when_a_project_vm_may_be_stale() -> None:
    assert stale_vm_possible([vm(SLUG_A)], NOW, AGE)
    assert not stale_vm_possible([vm(SLUG_A, when=RECENT), task(SLUG_B, 1), vm(SLUG_C, labels={})], NOW, AGE)
    assert not stale_vm_possible([vm(SLUG_A, active=True)], NOW, timedelta(0))


def test_a_stale_task_without_a_vm_does_not_take_volumes() -> None:
    inventory = Inventory(sandboxes=(task(SLUG_B, 1),), volumes=(volume(SLUG_B),), projects=KNOWN)
    assert names(plan(inventory)) == {task_name(SLUG_B, 1)}


def test_images_of_a_live_task_sandbox_stay_when_its_vm_is_gone() -> None:
    used = image(SLUG_B, "used")
    inventory = Inventory(
        sandboxes=(SandboxFact(task_name(SLUG_B, 1), True, used.reference, OLD, OLD, managed_labels(SLUG_B)),),
        runtime_images=(used, image(SLUG_B, "spare")),
        projects=KNOWN,
    )
    assert names(plan(inventory)) == {runner_image(SLUG_B, "spare")}


def test_the_plan_does_not_depend_on_input_order() -> None:
    items = (vm(SLUG_A), vm(SLUG_B), task(SLUG_C, 1))
    vols = (volume(SLUG_A), volume(SLUG_B))
    first = plan(Inventory(sandboxes=items, volumes=vols, projects=KNOWN))
    second = plan(Inventory(sandboxes=tuple(reversed(items)), volumes=tuple(reversed(vols)), projects=KNOWN))
    assert first == second


STRANGER = "theirs-0123456789abcd"
"""A project of another user on the same Docker engine: no folder in this user's state folder."""


def test_nothing_of_a_project_this_user_does_not_know_is_ever_planned() -> None:
    theirs = image(STRANGER, "cur")
    inventory = Inventory(
        sandboxes=(vm(STRANGER, image=theirs.reference), task(STRANGER, 1)),
        volumes=(volume(STRANGER),),
        runtime_images=(theirs, image(STRANGER, "older", OLD - timedelta(days=3))),
        docker_images=(docker_tag(STRANGER, "cur"), docker_tag(STRANGER, "spare")),
        projects={SLUG_A: ProjectRecord()},
    )
    assert plan(inventory, age=timedelta(0)) == []
    # the same artifacts under a project this user knows are all planned
    known = Inventory(sandboxes=inventory.sandboxes, volumes=inventory.volumes,
                      runtime_images=inventory.runtime_images, docker_images=inventory.docker_images,
                      projects={STRANGER: ProjectRecord()})
    assert len(plan(known, age=timedelta(0))) == 7


def test_images_of_a_known_project_without_a_vm_on_either_runtime_still_go() -> None:
    inventory = Inventory(
        sandboxes=(vm(STRANGER, when=RECENT, image=runner_image(STRANGER, "x")),),
        runtime_images=(image(SLUG_A, "old"),),
        docker_images=(docker_tag(SLUG_A, "old"), docker_tag(STRANGER, "x")),
        projects={SLUG_A: ProjectRecord()},
        elsewhere=(vm(STRANGER, when=RECENT),),
    )
    removals = plan(inventory, age=timedelta(0))
    assert [(r.kind, r.name, r.reason) for r in removals] == [
        (ArtifactKind.RUNTIME_IMAGE, runner_image(SLUG_A, "old"), "its project has no VM"),
        (ArtifactKind.DOCKER_IMAGE, runner_image(SLUG_A, "old"), "its project has no VM"),
    ]


def test_a_vm_on_the_other_runtime_keeps_its_project_alive() -> None:
    used = docker_tag(SLUG_A, "used", OLD)
    older = docker_tag(SLUG_A, "older", OLD - timedelta(days=2))
    newer = docker_tag(SLUG_A, "newer", OLD + timedelta(days=1))
    inventory = Inventory(docker_images=(used, older, newer), projects=KNOWN)
    assert names(plan(inventory, age=timedelta(0))) == {used.name, older.name, newer.name}
    on_docker = Inventory(docker_images=(used, older, newer), projects=KNOWN,
                          elsewhere=(vm(SLUG_A, image=runner_image(SLUG_A, "used")),))
    removals = plan(on_docker, age=timedelta(0))
    assert [(r.name, r.reason) for r in removals] == [(older.name, "older than the image of its project's VM")]


def test_a_pruned_vm_here_leaves_the_images_a_vm_elsewhere_needs() -> None:
    current = image(SLUG_A, "cur")
    older = image(SLUG_A, "older", OLD - timedelta(days=2))
    inventory = Inventory(sandboxes=(vm(SLUG_A, image=current.reference),), runtime_images=(current, older),
                          projects=KNOWN, elsewhere=(vm(SLUG_A, when=RECENT, image=current.reference),))
    removals = plan(inventory)
    assert [(r.kind, r.name) for r in removals] == [(ArtifactKind.VM, vm_name(SLUG_A)),
                                                   (ArtifactKind.RUNTIME_IMAGE, older.reference)]


def test_surplus_is_judged_against_the_oldest_image_of_the_projects_vms() -> None:
    first = image(SLUG_A, "first", OLD - timedelta(days=4))
    between = image(SLUG_A, "between", OLD - timedelta(days=2))
    second = image(SLUG_A, "second", OLD)
    inventory = Inventory(sandboxes=(vm(SLUG_A, when=RECENT, image=second.reference),),
                          runtime_images=(first, between, second), projects=KNOWN,
                          elsewhere=(vm(SLUG_A, when=RECENT, image=first.reference),))
    assert plan(inventory) == []
    unknown_image = Inventory(sandboxes=inventory.sandboxes, runtime_images=(between, second), projects=KNOWN,
                              elsewhere=inventory.elsewhere)
    assert plan(unknown_image) == []  # the image of the VM elsewhere is not listed: nothing is surplus


def test_when_the_other_runtime_cannot_be_asked_no_project_counts_as_vm_less() -> None:
    pruned = image(SLUG_A, "a")
    inventory = Inventory(
        sandboxes=(vm(SLUG_A, image=pruned.reference),),
        runtime_images=(pruned, image(SLUG_B, "b")),
        docker_images=(docker_tag(SLUG_B, "b"), dangling("ab")),
        projects=KNOWN,
        elsewhere=None,
    )
    assert [(r.kind, r.name) for r in plan(inventory)] == [
        (ArtifactKind.VM, vm_name(SLUG_A)),
        (ArtifactKind.RUNTIME_IMAGE, pruned.reference),
        (ArtifactKind.DOCKER_IMAGE, "sha256:" + "ab".ljust(64, "0")),
    ]


def test_an_image_a_foreign_sandbox_or_container_runs_on_is_never_planned() -> None:
    by_tag = image(SLUG_B, "tag")
    by_id = docker_tag(SLUG_B, "byid")
    spare = image(SLUG_B, "spare")
    inventory = Inventory(
        runtime_images=(by_tag, spare),
        docker_images=(by_id, dangling("cd")),
        projects=KNOWN,
        foreign_images=frozenset({by_tag.reference, by_id.image_id, "sha256:" + "cd".ljust(64, "0")}),
    )
    assert names(plan(inventory, age=timedelta(0))) == {spare.reference}


def test_a_shared_engine_prune_on_either_runtime_leaves_the_other_projects_images() -> None:
    """This user runs A on microsandbox (its VM stopped) and B on docker; another user runs
    STRANGER on the same Docker engine (its container stopped)."""
    a_image, b_image = runner_image(SLUG_A, "a"), runner_image(SLUG_B, "b")
    msb_vms = (vm(SLUG_A, image=a_image),)
    containers = (vm(SLUG_B, active=True, image=b_image), vm(STRANGER, image=runner_image(STRANGER, "s")))
    tags = (docker_tag(SLUG_A, "a"), docker_tag(SLUG_B, "b"), docker_tag(STRANGER, "s"),
            docker_tag(SLUG_B, "b-older", OLD - timedelta(days=1)), docker_tag(STRANGER, "s-older"))
    mine = {SLUG_A: ProjectRecord(image_reference=a_image), SLUG_B: ProjectRecord(image_reference=b_image)}

    under_msb = Inventory(sandboxes=msb_vms, runtime_images=(image(SLUG_A, "a"),), docker_images=tags,
                          projects=mine, elsewhere=containers)
    assert [(r.kind, r.name) for r in plan(under_msb, age=timedelta(0))] == [
        (ArtifactKind.VM, vm_name(SLUG_A)),
        (ArtifactKind.RUNTIME_IMAGE, a_image),
        (ArtifactKind.DOCKER_IMAGE, a_image),
        (ArtifactKind.DOCKER_IMAGE, runner_image(SLUG_B, "b-older")),
    ]

    docker_images = tuple(ImageFact(tag.name, tag.image_id, tag.created_at, OURS) for tag in tags)
    under_docker = Inventory(sandboxes=containers, runtime_images=docker_images, projects=mine, elsewhere=msb_vms)
    assert [(r.kind, r.name) for r in plan(under_docker, age=timedelta(0))] == [
        (ArtifactKind.RUNTIME_IMAGE, runner_image(SLUG_B, "b-older")),
    ]


_slugs = st.sampled_from([SLUG_A, SLUG_B, SLUG_C])
_times = st.one_of(st.none(), st.integers(min_value=0, max_value=60).map(lambda days: NOW - timedelta(days=days)))
_labels = st.sampled_from(["ours", "none", "other-slug"])


def _labels_for(kind: str, slug: str) -> dict[str, str]:
    if kind == "ours":
        return managed_labels(slug)
    if kind == "other-slug":
        return managed_labels(SLUG_C if slug != SLUG_C else SLUG_A)
    return {}


_sandboxes = st.builds(
    lambda slug, n, when, active, labels: SandboxFact(
        vm_name(slug) if n == 0 else task_name(slug, n), active, runner_image(slug, "t0"), when, when,
        _labels_for(labels, slug)),
    _slugs, st.integers(0, 2), _times, st.booleans(), _labels,
)
_volumes = st.builds(
    lambda slug, days, labels: VolumeFact(home_volume_name(slug, NOW - timedelta(days=days)),
                                          NOW - timedelta(days=days), _labels_for(labels, slug)),
    _slugs, st.integers(0, 60), _labels,
)
_images = st.builds(
    lambda slug, tag, when, ours: ImageFact(runner_image(slug, f"t{tag}"), f"sha256:{tag}", when, OURS if ours else {}),
    _slugs, st.integers(0, 3), _times, st.booleans(),
)
_pieces = st.builds(
    lambda slug, kind, when: PolicyPieceFact(kind, f"{kind.name.lower()}-{slug}", slug, when),
    _slugs, st.sampled_from(POLICY_PIECES), _times,
)


@settings(max_examples=300, deadline=None)
@given(
    sandboxes=st.lists(_sandboxes, max_size=6, unique_by=lambda s: s.name),
    volumes=st.lists(_volumes, max_size=6, unique_by=lambda v: v.name),
    images=st.lists(_images, max_size=6, unique_by=lambda i: i.reference),
    known=st.sets(_slugs),
    elsewhere=st.one_of(st.none(), st.lists(_sandboxes, max_size=3, unique_by=lambda s: s.name)),
    policy_pieces=st.lists(_pieces, max_size=4, unique_by=lambda p: p.name),
    foreign=st.sets(st.sampled_from([runner_image(slug, f"t{tag}") for slug in (SLUG_A, SLUG_B) for tag in range(4)])),
    age_days=st.integers(0, 40),
    scope=st.sampled_from(list(Scope)),
)
def test_properties_hold_for_any_inventory(
    sandboxes: list[SandboxFact], volumes: list[VolumeFact], images: list[ImageFact], known: set[str],
    elsewhere: list[SandboxFact] | None, policy_pieces: list[PolicyPieceFact], foreign: set[str], age_days: int,
    scope: Scope
) -> None:
    inventory = Inventory(tuple(sandboxes), tuple(volumes), tuple(images),
                          projects={slug: ProjectRecord() for slug in known},
                          elsewhere=None if elsewhere is None else tuple(elsewhere), foreign_images=frozenset(foreign),
                          policy_pieces=tuple(policy_pieces))
    removals = plan_prune(inventory, NOW, timedelta(days=age_days), scope)
    by_name = {s.name: s for s in sandboxes} | {v.name: v for v in volumes} | {i.reference: i for i in images}
    removed = {r.name for r in removals}
    for removal in removals:
        if removal.kind in POLICY_PIECES:  # only beside no sandbox of its project that stays
            assert scope in (Scope.ALL, Scope.SANDBOXES) and removal.slug in known
            assert all(s.name in removed for s in sandboxes if sandbox_slug(s) == removal.slug)
    removals = [r for r in removals if r.kind not in POLICY_PIECES]
    assert len({(r.kind, r.name) for r in removals}) == len(removals)
    pruned_vm_slugs = {r.slug for r in removals if r.kind is ArtifactKind.VM}
    used_elsewhere = {sandbox.image for sandbox in elsewhere or () if sandbox_slug(sandbox)}
    for removal in removals:
        artifact = by_name[removal.name]  # only what the inventory holds is ever planned
        assert artifact.labels.get(LABEL_MANAGED) == "true"
        assert removal.slug in known  # only projects this user knows
        assert removal.name not in foreign and removal.name not in used_elsewhere
        if removal.reason == "its project has no VM":
            assert elsewhere is not None
        if isinstance(artifact, SandboxFact):
            assert not artifact.active
            assert artifact.labels.get(LABEL_SLUG) == removal.slug
        if removal.kind is ArtifactKind.HOME_VOLUME:
            assert removal.slug in pruned_vm_slugs
    for sandbox in sandboxes:  # a project with an active sandbox of ours keeps its sandboxes and volumes
        slug = sandbox.labels.get(LABEL_SLUG, "")
        if sandbox.active and sandbox.labels == managed_labels(slug) and slug in sandbox.name:
            kept = (ArtifactKind.VM, ArtifactKind.TASK_SANDBOX, ArtifactKind.HOME_VOLUME)
            assert not any(r.slug == slug and r.kind in kept for r in removals)
