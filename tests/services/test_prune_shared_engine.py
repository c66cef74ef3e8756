"""Pruning on a Docker engine shared by both runtimes and by another user, with the real
Docker engine and the real msb.

This user runs one project on each runtime; another user (a project with no folder in this
user's state folder) runs one on the same engine. `prune --force -a 0s` on either runtime
removes neither the other runtime's project's images nor anything of the other user's.
The engine is shared with other tests too, so the runtimes are scoped to this test's names
and the Docker image store to this test's label (see `ScopedRuntime`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import LABEL_MANAGED, home_volume_name, managed_labels, runner_image, vm_name
from opencode_sandbox.core.prune_plan import ArtifactKind, Scope
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, RuntimeKind, SandboxSpec, SandboxStatus
from opencode_sandbox.services.docker_images import DockerEngineImages
from opencode_sandbox.services.prune import prune
from opencode_sandbox.state.store import ProjectState, StateStore
from tests.services.app_fakes import make_app, results_into
from tests.services.engine_artifacts import (
    TEST_LABEL,
    ScopedRuntime,
    build_image,
    clean_docker,
    container_exists,
    docker,
    docker_answers,
    image_exists,
    new_slug,
    run_labels,
    volume_exists,
)
from tests.services.test_prune_integration import msb

pytestmark = [pytest.mark.docker, pytest.mark.msb]


@dataclass(frozen=True)
class SharedEngine:
    token: str
    on_docker: str
    """This user's project on the docker runtime: its container runs."""
    on_msb: str
    """This user's project on microsandbox: its VM is stopped (VMs cannot boot everywhere)."""
    theirs: str
    """Another user's project on the docker runtime: its container is stopped."""

    @property
    def their_home(self) -> str:
        return home_volume_name(self.theirs, _HOME_TIME)

    def their_artifacts_exist(self) -> bool:
        images = (runner_image(self.theirs, "booted"), runner_image(self.theirs, "spare"))
        return (container_exists(vm_name(self.theirs)) and volume_exists(self.their_home)
                and all(image_exists(image) for image in images))


_HOME_TIME = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _msb_json(*args: str) -> list[dict[str, object]]:
    listed = msb(*args, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout or "[]"))


@pytest.fixture
def engine(unique: str, tmp_path: Path) -> Iterator[SharedEngine]:
    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    world = SharedEngine(unique, new_slug(unique + "d"), new_slug(unique + "m"), new_slug(unique + "t"))
    try:
        _plant(world, tmp_path)
        yield world
    finally:
        for entry in _msb_json("list"):
            msb("remove", "--force", "--quiet", str(entry["name"]))
        for entry in _msb_json("image", "list"):
            msb("image", "remove", "--force", "--quiet", str(entry["reference"]))
        clean_docker(unique)


def _plant(world: SharedEngine, tmp_path: Path) -> None:
    def tiny(slug: str, tag: str) -> None:
        """An image that never runs: a file and our labels."""
        folder = tmp_path / f"{slug}-{tag}"
        folder.mkdir()
        (folder / "file").write_text(f"{slug} {tag}\n")
        (folder / "Dockerfile").write_text(f"FROM scratch\nCOPY file /file\nLABEL {TEST_LABEL}={world.token}\n"
                                           f"LABEL {LABEL_MANAGED}=true\n")
        docker("build", "--quiet", "--tag", runner_image(slug, tag), str(folder), check=True)

    tiny(world.on_docker, "older")
    time.sleep(1.1)  # `docker image ls` tells creation times to the second: "older" must be older
    build_image(runner_image(world.on_docker, "booted"), tmp_path / "runnable", world.token)
    for slug, tag in ((world.on_docker, "rebuilt"), (world.on_msb, "booted"), (world.on_msb, "rebuilt"),
                      (world.theirs, "booted"), (world.theirs, "spare")):
        tiny(slug, tag)

    volume = home_volume_name(world.on_docker, _HOME_TIME)
    docker_runtime = DockerRuntime()
    docker_runtime.create_volume(volume, managed_labels(world.on_docker))
    docker_runtime.create_sandbox(SandboxSpec(vm_name(world.on_docker), runner_image(world.on_docker, "booted"), 1,
                                              256, labels=managed_labels(world.on_docker),
                                              mounts=(Mount(MountKind.VOLUME, volume, "/home/dev"),)))
    # the other user's VM, stopped: created as the docker runtime does, never started
    labels = [arg for key, value in managed_labels(world.theirs).items() for arg in ("--label", f"{key}={value}")]
    docker("volume", "create", *labels, world.their_home, check=True)
    docker("create", "--name", vm_name(world.theirs), *labels, "--volume", f"{world.their_home}:/home/dev",
           runner_image(world.theirs, "booted"), "/file", check=True)

    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    msb_runtime = MicrosandboxRuntime()
    loaded = msb_runtime.load_image(runner_image(world.on_msb, "booted"))
    args = ["create", loaded.reference, "--name", vm_name(world.on_msb), "--pull", "never", "--quiet"]
    for key, value in managed_labels(world.on_msb).items():
        args += ["--label", f"{key}={value}"]
    msb(*args)  # a boot fails here; the stopped record stays, and pruning judges it
    vm = msb_runtime.get_sandbox(vm_name(world.on_msb))
    if vm is None:
        pytest.skip("msb left no sandbox record behind (the VM booted and went away)")
    if vm.status.is_active:
        msb_runtime.stop_sandbox(vm.name)

    store = StateStore(ToolPaths.from_environment().state_dir)
    for slug in (world.on_docker, world.on_msb):  # this user's projects; the other user's has no folder here
        store.save(slug, ProjectState(image_reference=runner_image(slug, "rebuilt")))


def _prune(world: SharedEngine, kind: RuntimeKind, tmp_path: Path) -> set[tuple[ArtifactKind, str]]:
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    docker_runtime = ScopedRuntime(DockerRuntime(), world.token)
    msb_runtime = ScopedRuntime(MicrosandboxRuntime(), world.token)
    runtime, other = (docker_runtime, msb_runtime) if kind is RuntimeKind.DOCKER else (msb_runtime, docker_runtime)
    app = make_app(runtime, tmp_path, other=other)  # type: ignore[arg-type]
    lines: list[str] = []
    outcome = prune(results_into(app, lines), "0s", Scope.ALL, dry_run=False, force=True,
                    docker=DockerEngineImages(labels=run_labels(world.token)))
    assert outcome.failed == [], lines
    assert {(r.kind, r.name) for r in outcome.removed} == {(r.kind, r.name) for r in outcome.plan}
    return {(r.kind, r.name) for r in outcome.plan}


def test_a_prune_on_either_runtime_leaves_the_other_runtimes_project_and_the_other_user_alone(
    engine: SharedEngine, tmp_path: Path
) -> None:
    planned = _prune(engine, RuntimeKind.DOCKER, tmp_path)
    # the only stale artifact: an image older than the one the running container was created from
    assert planned == {(ArtifactKind.RUNTIME_IMAGE, runner_image(engine.on_docker, "older"))}
    assert not image_exists(runner_image(engine.on_docker, "older"))
    for tag in ("booted", "rebuilt"):
        assert image_exists(runner_image(engine.on_docker, tag))
        assert image_exists(runner_image(engine.on_msb, tag))
    assert engine.their_artifacts_exist()

    planned = _prune(engine, RuntimeKind.MICROSANDBOX, tmp_path)
    own = runner_image(engine.on_msb, "booted")
    # this runtime's own project: its VM is stale at age 0 and takes its images along
    assert planned == {
        (ArtifactKind.VM, vm_name(engine.on_msb)),
        (ArtifactKind.RUNTIME_IMAGE, own),
        (ArtifactKind.DOCKER_IMAGE, own),
        (ArtifactKind.DOCKER_IMAGE, runner_image(engine.on_msb, "rebuilt")),
    }
    assert own not in {entry["reference"] for entry in _msb_json("image", "list")}
    running = DockerRuntime().get_sandbox(vm_name(engine.on_docker))
    assert running is not None and running.status is SandboxStatus.RUNNING
    assert image_exists(runner_image(engine.on_docker, "booted"))
    assert image_exists(runner_image(engine.on_docker, "rebuilt"))
    assert engine.their_artifacts_exist()
