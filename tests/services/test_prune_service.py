"""The prune service with the fake runtime: plan, show, confirm, apply, summarise."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import (
    KIND_PROXY,
    LABEL_KIND,
    PROXY_REPOSITORY,
    home_volume_name,
    managed_labels,
    runner_image,
    vm_name,
)
from opencode_sandbox.core.prune_plan import POLICY_PIECES, ArtifactKind, DockerImageFact, Scope, plan_prune
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.types import RuntimeKind, SandboxInfo, SandboxStatus
from opencode_sandbox.services import prune as prune_service
from opencode_sandbox.services.inventory import gather_inventory
from opencode_sandbox.services.prune import (
    apply_plan,
    auto_prune,
    auto_prune_now,
    prune,
)
from opencode_sandbox.state.store import ProjectState, StateStore
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import FakeDockerImages, make_app, messages, plant_project, results_into

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=40)
STALE = "stale-0123456789abcd"
LIVE = "live-abcdefghijklmn"
OURS = {"org.opencode-sandbox.managed": "true"}


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    yield runtime
    runtime.close()


def planted(fake: FakeRuntime) -> dict[str, str]:
    stale_volume, stale_image = plant_project(fake, STALE, volume_time=OLD, activity=OLD)
    live_volume, live_image = plant_project(fake, LIVE, volume_time=OLD, status=SandboxStatus.RUNNING)
    fake.add_foreign_sandbox(vm_name("foreign-0123456789abcd"))  # our name, no labels
    fake.add_foreign_volume(home_volume_name("foreign-0123456789abcd", OLD))
    return {"stale_volume": stale_volume, "stale_image": stale_image, "live_volume": live_volume,
            "live_image": live_image}


def write_state(slug: str, volume: str, image: str) -> None:
    StateStore(ToolPaths.from_environment().state_dir).save(slug, ProjectState(home_volume=volume,
                                                                               image_reference=image))


def test_dry_run_prints_the_plan_and_removes_nothing(fake: FakeRuntime, tmp_path: Path) -> None:
    names = planted(fake)
    app = make_app(fake, tmp_path)
    docker = FakeDockerImages([DockerImageFact("sha256:" + "d" * 64, None, OLD, OURS)])
    lines: list[str] = []
    outcome = prune(results_into(app, lines), "7d", Scope.ALL, dry_run=True, force=False, docker=docker)
    assert lines[-1] == "dry-run: Would prune 1 VMs, 1 home volumes, 1 docker images, 1 msb images"
    assert lines[0] == "Would prune (unused for more than 7d):"
    body = "\n".join(lines)
    for name in (vm_name(STALE), names["stale_volume"], names["stale_image"], "sha256:" + "d" * 64):
        assert name in body
    assert vm_name(LIVE) not in body and names["live_volume"] not in body
    # the policy pieces are the docker runtime's only (tests/e2e/test_network_policy_docker.py)
    assert {r.kind for r in outcome.plan} == set(ArtifactKind) - {ArtifactKind.TASK_SANDBOX} - set(POLICY_PIECES)
    assert vm_name(STALE) in fake.sandboxes and names["stale_volume"] in fake.volumes
    assert not docker.removed
    assert not [call for call in fake.calls if call[0].startswith("remove")]


def test_force_removes_exactly_the_plan_and_forgets_the_project(fake: FakeRuntime, tmp_path: Path) -> None:
    names = planted(fake)
    write_state(STALE, names["stale_volume"], names["stale_image"])
    write_state(LIVE, names["live_volume"], names["live_image"])
    app = make_app(fake, tmp_path)
    docker = FakeDockerImages([DockerImageFact("sha256:" + "d" * 64, None, OLD, OURS),
                               DockerImageFact("sha256:" + "e" * 64, None, OLD, {"other": "x"})])
    lines: list[str] = []
    prune(results_into(app, lines), None, Scope.ALL, dry_run=False, force=True, docker=docker)
    assert lines[-1] == "Pruned 1 VMs, 1 home volumes, 1 docker images, 1 msb images"
    assert set(fake.sandboxes) == {vm_name(LIVE), vm_name("foreign-0123456789abcd")}
    assert set(fake.volumes) == {names["live_volume"], home_volume_name("foreign-0123456789abcd", OLD)}
    assert set(fake.images) == {names["live_image"]}
    assert docker.removed == ["sha256:" + "d" * 64]
    assert not app.state.state_path(STALE).exists()
    assert app.state.load(LIVE).home_volume == names["live_volume"]


def test_docker_runtime_counts_runner_images_as_docker_images(tmp_path: Path) -> None:
    fake = FakeRuntime(RuntimeKind.DOCKER)
    plant_project(fake, STALE, volume_time=OLD, activity=OLD)
    lines: list[str] = []
    prune(results_into(make_app(fake, tmp_path), lines),
          "1d", Scope.ALL, dry_run=False, force=True, docker=FakeDockerImages())
    assert lines[-1] == "Pruned 1 VMs, 1 home volumes, 1 docker images, 0 msb images"
    assert "docker image" in "\n".join(lines) and "msb image" not in "\n".join(lines[:-1])


def test_sandbox_scope_keeps_volumes_images_and_the_state_file(fake: FakeRuntime, tmp_path: Path) -> None:
    names = planted(fake)
    write_state(STALE, names["stale_volume"], names["stale_image"])
    lines: list[str] = []
    prune(results_into(make_app(fake, tmp_path), lines),
          "7d", Scope.SANDBOXES, dry_run=False, force=True, docker=FakeDockerImages())
    assert lines[-1] == "Pruned 1 VMs, 0 home volumes, 0 docker images, 0 msb images"
    assert names["stale_volume"] in fake.volumes and names["stale_image"] in fake.images
    assert make_app(fake, tmp_path).state.load(STALE).home_volume == names["stale_volume"]


def test_volume_scope_takes_the_vm_along_and_leaves_images(fake: FakeRuntime, tmp_path: Path) -> None:
    names = planted(fake)
    lines: list[str] = []
    prune(results_into(make_app(fake, tmp_path), lines),
          "7d", Scope.VOLUMES, dry_run=False, force=True, docker=FakeDockerImages())
    assert lines[-1] == "Pruned 1 VMs, 1 home volumes, 0 docker images, 0 msb images"
    assert names["stale_volume"] not in fake.volumes and names["stale_image"] in fake.images
    assert ("list_images", "") not in fake.calls


def test_nothing_stale_prints_nothing_to_prune(fake: FakeRuntime, tmp_path: Path) -> None:
    plant_project(fake, LIVE, volume_time=OLD, status=SandboxStatus.RUNNING)
    lines: list[str] = []
    prune(results_into(make_app(fake, tmp_path), lines),
          "0", Scope.ALL, dry_run=False, force=False, docker=FakeDockerImages())
    assert lines == ["Nothing to prune.", "Pruned 0 VMs, 0 home volumes, 0 docker images, 0 msb images"]


def test_without_a_terminal_and_without_force_nothing_is_removed(fake: FakeRuntime, tmp_path: Path) -> None:
    planted(fake)
    before = (set(fake.sandboxes), set(fake.volumes), set(fake.images))
    for assume_yes in (False, True):
        with pytest.raises(UsageError) as raised:
            prune(make_app(fake, tmp_path, assume_yes=assume_yes), "7d", Scope.ALL, dry_run=False, force=False,
                  docker=FakeDockerImages())
        assert "--force" in (raised.value.hint or "")
    assert (set(fake.sandboxes), set(fake.volumes), set(fake.images)) == before


@pytest.mark.parametrize("answer", [True, False])
def test_the_confirmation_decides(fake: FakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  answer: bool) -> None:
    planted(fake)
    questions: list[str] = []

    class Answering:
        def choose(self, question: str, choices: Sequence[str], default: str) -> str:
            raise AssertionError(f"not a choice: {question}")

        def confirm(self, question: str, default: bool) -> bool:
            questions.append(question)
            assert default is False
            return answer

    app = make_app(fake, tmp_path, interactive=True)
    app.console.asker = Answering()
    lines: list[str] = []
    outcome = prune(results_into(app, lines), "7d", Scope.ALL, dry_run=False, force=False, docker=FakeDockerImages())
    assert questions == ["Remove these 3 artifacts?"]
    summary = "Pruned 1 VMs, 1 home volumes, 0 docker images, 1 msb images"
    assert lines[-1] == (summary if answer else "Nothing removed.")
    assert len(outcome.removed) == (3 if answer else 0)
    assert (vm_name(STALE) in fake.sandboxes) is not answer


def test_an_artifact_that_vanished_meanwhile_counts_as_gone(fake: FakeRuntime, tmp_path: Path) -> None:
    names = planted(fake)
    app = make_app(fake, tmp_path)
    inventory = gather_inventory(fake, FakeDockerImages(), app.state, app.console.warn)
    plan = plan_prune(inventory, NOW, timedelta(days=7))
    del fake.images[names["stale_image"]]
    fake.remove_sandbox(vm_name(STALE))
    outcome = apply_plan(plan, fake, FakeDockerImages(), app.state, app.console.warn)
    assert outcome.failed == [] and len(outcome.removed) == 3
    assert names["stale_volume"] not in fake.volumes
    assert "warning" not in messages(app)


def test_a_failed_removal_warns_and_the_rest_goes_on(fake: FakeRuntime, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    names = planted(fake)
    app = make_app(fake, tmp_path)

    def refuse(name: str) -> None:
        raise SandboxError(f"volume {name} is busy", hint="-")

    monkeypatch.setattr(fake, "remove_volume", refuse)
    lines: list[str] = []
    with pytest.raises(SandboxError, match="1 of 3 removals failed"):
        prune(results_into(app, lines), "7d", Scope.ALL, dry_run=False, force=True, docker=FakeDockerImages())
    assert lines[-1] == "Pruned 1 VMs, 0 home volumes, 0 docker images, 1 msb images"
    assert f"could not remove home volume {names['stale_volume']}: volume {names['stale_volume']} is busy" in \
        messages(app)
    assert names["stale_image"] not in fake.images


def test_a_vm_that_became_active_after_the_snapshot_is_left_alone(fake: FakeRuntime, tmp_path: Path) -> None:
    planted(fake)
    app = make_app(fake, tmp_path)
    inventory = gather_inventory(fake, FakeDockerImages(), app.state, app.console.warn)
    plan = plan_prune(inventory, NOW, timedelta(days=7), Scope.SANDBOXES)
    fake.start_sandbox(vm_name(STALE))
    outcome = apply_plan(plan, fake, None, app.state, app.console.warn)
    assert outcome.removed == [] and len(outcome.failed) == 1
    assert fake.sandboxes[vm_name(STALE)].status is SandboxStatus.RUNNING
    assert "became active" in messages(app)


def test_an_invalid_age_is_a_usage_error(fake: FakeRuntime, tmp_path: Path) -> None:
    for text in ("-1d", "7 days", "36501d"):
        with pytest.raises(UsageError, match="invalid --age"):
            prune(make_app(fake, tmp_path), text, Scope.ALL, dry_run=True, force=False, docker=FakeDockerImages())
    assert fake.calls == []


def test_a_missing_docker_engine_only_leaves_docker_images_out(fake: FakeRuntime, tmp_path: Path) -> None:
    planted(fake)

    class NoEngine(FakeDockerImages):
        def list_images(self, include_tagged: bool) -> list[DockerImageFact]:
            raise SandboxError("docker is not answering", hint="-")

    app = make_app(fake, tmp_path)
    lines: list[str] = []
    prune(results_into(app, lines), "7d", Scope.ALL, dry_run=True, force=False, docker=NoEngine())
    assert lines[-1] == "dry-run: Would prune 1 VMs, 1 home volumes, 0 docker images, 1 msb images"
    assert "Docker images are left out: docker is not answering" in messages(app)


def test_auto_prune_returns_at_once_when_nothing_is_stale(fake: FakeRuntime, tmp_path: Path) -> None:
    plant_project(fake, LIVE, volume_time=OLD, status=SandboxStatus.RUNNING)
    app = make_app(fake, tmp_path)
    docker = FakeDockerImages()
    fake.calls.clear()
    outcome = auto_prune_now(fake, docker, app.state, timedelta(days=30), app.console)
    assert outcome is not None and outcome.plan == []
    # no VM can be stale, so no volume can go: the volumes are not even listed
    assert [operation for operation, _ in fake.calls] == ["list_sandboxes", "list_images", "sandbox_images"]
    assert docker.listed == 1
    assert messages(app) == ""


def test_auto_prune_removes_stale_artifacts_without_asking(fake: FakeRuntime, tmp_path: Path) -> None:
    names = planted(fake)
    app = make_app(fake, tmp_path, interactive=True)
    outcome = auto_prune_now(fake, FakeDockerImages(), app.state, timedelta(days=30), app.console)
    assert outcome is not None and len(outcome.removed) == 3
    assert names["stale_volume"] not in fake.volumes
    assert "auto-prune: Pruned 1 VMs, 1 home volumes, 0 docker images, 1 msb images" in messages(app)


def test_auto_prune_age_zero_is_off(fake: FakeRuntime, tmp_path: Path) -> None:
    planted(fake)
    app = make_app(fake, tmp_path)
    fake.calls.clear()
    assert auto_prune_now(fake, FakeDockerImages(), app.state, timedelta(0), app.console) is None
    assert fake.calls == []


def test_auto_prune_runs_once_per_process_and_never_raises(fake: FakeRuntime, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prune_service, "_auto_prune_once", prune_service._Once())
    monkeypatch.setattr(prune_service, "DockerEngineImages", lambda engine: FakeDockerImages())
    fake.engine_down = True
    app = make_app(fake, tmp_path)
    assert auto_prune(app) is None
    assert "auto-prune skipped: the engine is not answering" in messages(app)
    fake.engine_down = False
    planted(fake)
    assert auto_prune(app) is None
    assert vm_name(STALE) in fake.sandboxes


def test_surplus_and_dangling_images_go_while_the_live_project_stays(fake: FakeRuntime, tmp_path: Path) -> None:
    _, current = plant_project(fake, LIVE, volume_time=OLD, image_tag="new", status=SandboxStatus.RUNNING)
    older = runner_image(LIVE, "old")
    fake.add_docker_image(older, labels=OURS)
    fake.load_image(older)
    fake.images[older].created_at = OLD
    fake.images[current].created_at = OLD + timedelta(days=5)
    docker = FakeDockerImages([
        DockerImageFact("sha256:" + "1" * 64, older, OLD, OURS),
        DockerImageFact("sha256:" + "2" * 64, current, OLD + timedelta(days=5), OURS),
        DockerImageFact("sha256:" + "3" * 64, "opencode-sandbox/runner-base:latest", OLD, OURS),
    ])
    lines: list[str] = []
    prune(results_into(make_app(fake, tmp_path), lines), "7d", Scope.IMAGES, dry_run=False, force=True, docker=docker)
    assert lines[-1] == "Pruned 0 VMs, 0 home volumes, 1 docker images, 1 msb images"
    assert set(fake.images) == {current}
    assert docker.removed == [older]
    assert fake.sandboxes[vm_name(LIVE)].status is SandboxStatus.RUNNING
    assert managed_labels(LIVE).items() <= fake.sandboxes[vm_name(LIVE)].labels.items()


def test_docker_listing_times_are_read_with_their_zone() -> None:
    from opencode_sandbox.engine.docker import parse_created

    assert parse_created("2026-01-02 03:04:05 +0100 CET") == datetime(2026, 1, 2, 2, 4, 5, tzinfo=UTC)
    assert parse_created("yesterday") is None


def test_images_of_projects_on_the_other_runtime_or_of_other_users_stay(tmp_path: Path) -> None:
    """Under microsandbox: this user's docker-runtime project and another user's project
    share the Docker engine; only this user's VM-less project loses its images."""
    runtime, docker_runtime = FakeRuntime(RuntimeKind.MICROSANDBOX), FakeRuntime(RuntimeKind.DOCKER)
    on_docker, theirs, gone = "docked-0123456789abcd", "theirs-0123456789abcd", "gone-0123456789abcd"
    plant_project(docker_runtime, on_docker, volume_time=OLD, activity=OLD)
    plant_project(docker_runtime, theirs, volume_time=OLD, activity=OLD)
    StateStore(ToolPaths.from_environment().state_dir).remove(theirs)
    (ToolPaths.from_environment().state_dir / theirs).rmdir()  # another user's: not in this state folder
    know = ProjectState(image_reference=runner_image(gone, "cur"))
    StateStore(ToolPaths.from_environment().state_dir).save(gone, know)
    older = OLD - timedelta(days=1)
    docker = FakeDockerImages([DockerImageFact("sha256:" + f"{n}" * 64, runner_image(slug, tag), created, OURS)
                               for n, (slug, tag, created) in enumerate([
                                   (on_docker, "c0ffee", OLD), (on_docker, "old", older),
                                   (theirs, "c0ffee", OLD), (theirs, "old", older),
                                   (gone, "cur", OLD), (gone, "old", older)])])
    lines: list[str] = []
    app = make_app(runtime, tmp_path, other=docker_runtime)
    prune(results_into(app, lines), "0s", Scope.ALL, dry_run=False, force=True, docker=docker)
    assert docker.removed == [runner_image(on_docker, "old"), runner_image(gone, "old")]
    assert lines[-1] == "Pruned 0 VMs, 0 home volumes, 2 docker images, 0 msb images"
    assert set(docker_runtime.sandboxes) == {vm_name(on_docker), vm_name(theirs)}


def test_when_the_other_runtime_does_not_answer_vm_less_projects_keep_their_images(tmp_path: Path) -> None:
    runtime, docker_runtime = FakeRuntime(RuntimeKind.MICROSANDBOX), FakeRuntime(RuntimeKind.DOCKER)
    slug = "gone-0123456789abcd"
    StateStore(ToolPaths.from_environment().state_dir).save(slug, ProjectState())
    docker = FakeDockerImages([DockerImageFact("sha256:" + "1" * 64, runner_image(slug, "old"), OLD, OURS)])
    docker_runtime.engine_down = True
    app = make_app(runtime, tmp_path, other=docker_runtime)
    lines: list[str] = []
    prune(results_into(app, lines), "0s", Scope.IMAGES, dry_run=True, force=False, docker=docker)
    assert lines == ["Nothing to prune.", "dry-run: Would prune 0 VMs, 0 home volumes, 0 docker images, 0 msb images"]
    assert ("images of projects without a VM are kept: the docker runtime's sandboxes cannot be listed: "
            "the engine is not answering") in messages(app)
    docker_runtime.engine_down = False
    prune(results_into(app, lines), "0s", Scope.IMAGES, dry_run=True, force=False, docker=docker)
    assert lines[-1] == "dry-run: Would prune 0 VMs, 0 home volumes, 1 docker images, 0 msb images"


def test_an_image_a_foreign_sandbox_runs_on_stays(fake: FakeRuntime, tmp_path: Path) -> None:
    slug = "gone-0123456789abcd"
    StateStore(ToolPaths.from_environment().state_dir).save(slug, ProjectState())
    used, spare = runner_image(slug, "used"), runner_image(slug, "spare")
    for reference in (used, spare):
        fake.add_docker_image(reference, labels=OURS)
        fake.load_image(reference)
        fake.images[reference].created_at = OLD
    fake.add_foreign_sandbox("someone-elses-vm", image=used)
    outcome = prune(make_app(fake, tmp_path), "0s", Scope.IMAGES, dry_run=True, force=False,
                    docker=FakeDockerImages())
    assert [(removal.name, removal.reason) for removal in outcome.plan] == [(spare, "its project has no VM")]


@pytest.mark.parametrize("kind", [RuntimeKind.DOCKER, RuntimeKind.MICROSANDBOX])
def test_egress_proxy_images_go_when_no_container_of_the_docker_engine_runs_on_them(
    kind: RuntimeKind, tmp_path: Path,
) -> None:
    labels = {**OURS, LABEL_KIND: KIND_PROXY}
    unused = DockerImageFact("sha256:" + "1" * 64, f"{PROXY_REPOSITORY}:old", OLD, labels)
    running = DockerImageFact("sha256:" + "2" * 64, f"{PROXY_REPOSITORY}:new", OLD, labels)
    chosen, other = FakeRuntime(kind), FakeRuntime(RuntimeKind.DOCKER if kind is RuntimeKind.MICROSANDBOX
                                                   else RuntimeKind.MICROSANDBOX)
    engine = chosen if kind is RuntimeKind.DOCKER else other
    engine.add_foreign_sandbox("opencode-sandbox-proxy-p-0123456789abcd", image=running.name)
    try:
        app = make_app(chosen, tmp_path, other=other)
        docker = FakeDockerImages([unused, running])
        outcome = prune(app, "7d", Scope.IMAGES, dry_run=False, force=True, docker=docker)
        assert [(r.kind, r.name) for r in outcome.plan] == [(ArtifactKind.DOCKER_IMAGE, unused.name)]
        assert docker.removed == [unused.name] and running.name in docker.images
    finally:
        chosen.close()
        other.close()


def test_egress_proxy_images_stay_when_the_docker_engines_containers_cannot_be_listed(
    fake: FakeRuntime, tmp_path: Path,
) -> None:
    unused = DockerImageFact("sha256:" + "1" * 64, f"{PROXY_REPOSITORY}:old", OLD, {**OURS, LABEL_KIND: KIND_PROXY})

    class Unanswering(FakeRuntime):
        def list_sandboxes(self) -> list[SandboxInfo]:
            raise SandboxError("docker is not answering", hint="-")

    other = Unanswering(RuntimeKind.DOCKER)
    try:
        app = make_app(fake, tmp_path, other=other)
        outcome = prune(app, "7d", Scope.IMAGES, dry_run=True, force=False, docker=FakeDockerImages([unused]))
        assert outcome.plan == []
    finally:
        other.close()
