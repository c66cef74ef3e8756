"""Pruning against the real Docker engine (docker runtime) and the real msb.

This tool's artifacts and look-alikes are planted, the prune runs, and exactly the planned
artifacts are gone afterwards. The engine is shared, so the runtime is scoped to this test's
names and the Docker image store to this test's label (see `ScopedRuntime`).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
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
from opencode_sandbox.core.prune_plan import ArtifactKind, Scope
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec, SandboxStatus
from opencode_sandbox.services.docker_images import DockerEngineImages
from opencode_sandbox.services.prune import prune
from tests.cli.helpers import run_cli
from tests.services.app_fakes import know_projects, make_app, results_into
from tests.services.engine_artifacts import (
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


@pytest.fixture
def token(unique: str) -> Iterator[str]:
    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    yield unique
    clean_docker(unique)


@pytest.mark.docker
def test_docker_runtime_prune_removes_exactly_the_plan(token: str, tmp_path: Path) -> None:
    stale, live, foreign = new_slug(token + "s"), new_slug(token + "l"), new_slug(token + "f")
    runtime = DockerRuntime()
    know_projects(stale, live)
    stale_image = runner_image(stale, "s1")
    build_image(stale_image, tmp_path / "stale", token)
    live_old = runner_image(live, "old")
    build_image(live_old, tmp_path / "old", token, home_text="old")
    time.sleep(1.1)  # Docker's creation times must differ for "older than"
    live_new = runner_image(live, "new")
    build_image(live_new, tmp_path / "new", token, home_text="new")
    # a rebuild under the same tag leaves the previous image dangling, with our labels
    rebuilt = runner_image(live, "rebuilt")
    dangling_id = build_image(rebuilt, tmp_path / "rebuilt-1", token, home_text="first")
    build_image(rebuilt, tmp_path / "rebuilt-2", token, home_text="second")
    foreign_dangling = build_image(f"{token}-foreign:x", tmp_path / "foreign-1", token, ours=False, home_text="a")
    build_image(f"{token}-foreign:x", tmp_path / "foreign-2", token, ours=False, home_text="b")
    foreign_image = runner_image(foreign, "x")
    build_image(foreign_image, tmp_path / "foreign-runner", token, ours=False)

    stale_volume = home_volume_name(stale)
    live_volume = home_volume_name(live)
    for slug, volume, image in ((stale, stale_volume, stale_image), (live, live_volume, live_new)):
        runtime.create_volume(volume, managed_labels(slug))
        runtime.fill_volume_from_image(volume, image)
        runtime.create_sandbox(SandboxSpec(vm_name(slug), image, 1, 256, labels=managed_labels(slug),
                                           mounts=(Mount(MountKind.VOLUME, volume, "/home/dev"),)))
    runtime.stop_sandbox(vm_name(stale), timeout_s=1)
    docker("create", "--name", vm_name(foreign), "debian:trixie-slim", check=True)
    foreign_volume = home_volume_name(foreign)
    docker("volume", "create", foreign_volume, check=True)
    bare_prefix_volume = f"opencode-sandbox-home-{token}"
    docker("volume", "create", "--label", "org.opencode-sandbox.managed=true", bare_prefix_volume, check=True)

    app = make_app(ScopedRuntime(runtime, token), tmp_path)  # type: ignore[arg-type]
    store = DockerEngineImages(labels=run_labels(token))
    lines: list[str] = []
    outcome = prune(results_into(app, lines), "0", Scope.ALL, dry_run=False, force=True, docker=store)

    planned = {(removal.kind, removal.name) for removal in outcome.plan}
    assert planned == {
        (ArtifactKind.VM, vm_name(stale)),
        (ArtifactKind.HOME_VOLUME, stale_volume),
        (ArtifactKind.RUNTIME_IMAGE, stale_image),
        (ArtifactKind.RUNTIME_IMAGE, live_old),
        (ArtifactKind.DOCKER_IMAGE, dangling_id),
    }
    assert outcome.failed == []
    assert lines[-1] == "Pruned 1 VMs, 1 home volumes, 3 docker images, 0 msb images"
    assert not container_exists(vm_name(stale)) and not volume_exists(stale_volume)
    assert not image_exists(stale_image) and not image_exists(live_old) and not image_exists(dangling_id)
    running = runtime.get_sandbox(vm_name(live))
    assert running is not None and running.status is SandboxStatus.RUNNING
    assert volume_exists(live_volume) and image_exists(live_new) and image_exists(rebuilt)
    assert container_exists(vm_name(foreign)) and volume_exists(foreign_volume) and volume_exists(bare_prefix_volume)
    assert image_exists(foreign_image) and image_exists(foreign_dangling)


@pytest.mark.docker
def test_egress_proxy_images_go_when_no_container_runs_on_them(token: str, tmp_path: Path) -> None:
    kind = f"LABEL {LABEL_KIND}={KIND_PROXY}\n"
    unused, running = f"{PROXY_REPOSITORY}:{token}-old", f"{PROXY_REPOSITORY}:{token}-new"
    build_image(unused, tmp_path / "old", token, home_text="old", extra=kind)
    build_image(running, tmp_path / "new", token, home_text="new", extra=kind)
    docker("create", "--name", f"{token}-proxy", running, check=True)

    app = make_app(ScopedRuntime(DockerRuntime(), token), tmp_path)  # type: ignore[arg-type]
    lines: list[str] = []
    outcome = prune(results_into(app, lines), "0", Scope.IMAGES, dry_run=False, force=True,
                    docker=DockerEngineImages(labels=run_labels(token)))

    assert [(removal.kind, removal.name) for removal in outcome.plan] == [(ArtifactKind.DOCKER_IMAGE, unused)]
    assert outcome.failed == [] and lines[-1] == "Pruned 0 VMs, 0 home volumes, 1 docker images, 0 msb images"
    assert not image_exists(unused) and image_exists(running)


@pytest.mark.docker
def test_docker_runtime_cli_dry_run_shows_the_plan(token: str, tmp_path: Path) -> None:
    stale = new_slug(token + "s")
    know_projects(stale)
    runtime = DockerRuntime()
    image = runner_image(stale, "s1")
    build_image(image, tmp_path / "image", token)
    volume = home_volume_name(stale)
    runtime.create_volume(volume, managed_labels(stale))
    runtime.create_sandbox(SandboxSpec(vm_name(stale), image, 1, 256, labels=managed_labels(stale),
                                       mounts=(Mount(MountKind.VOLUME, volume, "/home/dev"),)))
    runtime.stop_sandbox(vm_name(stale), timeout_s=1)
    folder = tmp_path / "checkout"
    folder.mkdir()
    result = run_cli("--runtime", "docker", "prune", "--dry-run", "-a", "0", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"dry-run: Would prune \d+ VMs, \d+ home volumes, \d+ docker images, 0 msb images",
                        result.stdout.splitlines()[-1])
    plan_lines = [line for line in result.stdout.splitlines() if stale in line]
    parsed = [re.fullmatch(r"  (vm|home volume|docker image)\s+(\S+)\s+\((.+)\)", line) for line in plan_lines]
    assert [(match.group(1), match.group(2)) for match in parsed if match] == [
        ("vm", vm_name(stale)), ("home volume", volume), ("docker image", image)]
    assert container_exists(vm_name(stale)) and volume_exists(volume) and image_exists(image)
    refused = run_cli("--runtime", "docker", "sandbox", "prune", "-a", "0", cwd=folder)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert container_exists(vm_name(stale))


def msb(*args: str) -> subprocess.CompletedProcess[str]:
    from opencode_sandbox.runtime.microsandbox.cli import locate_msb

    return subprocess.run([str(locate_msb()), *args], capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def msb_home(token: str) -> Iterator[None]:
    yield
    for entry in json.loads(msb("list", "--format", "json").stdout or "[]"):
        msb("remove", "--force", "--quiet", str(entry["name"]))
    for entry in json.loads(msb("volume", "list", "--format", "json").stdout or "[]"):
        msb("volume", "remove", "--quiet", str(entry["name"]))
    for entry in json.loads(msb("image", "list", "--format", "json").stdout or "[]"):
        msb("image", "remove", "--force", "--quiet", str(entry["reference"]))


@pytest.mark.msb
@pytest.mark.docker
def test_microsandbox_prune_removes_exactly_the_plan(token: str, msb_home: None, tmp_path: Path) -> None:
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    stale, foreign = new_slug(token + "s"), new_slug(token + "f")
    runtime = MicrosandboxRuntime()
    know_projects(stale)
    image = runner_image(stale, "s1")
    build_image(image, tmp_path / "image", token)
    loaded = runtime.load_image(image)
    foreign_image = runner_image(foreign, "x")
    build_image(foreign_image, tmp_path / "foreign", token, ours=False)
    archive = _save(foreign_image, tmp_path)
    assert msb("load", "--quiet", "--tag", foreign_image, "--input", str(archive)).returncode == 0
    volume = home_volume_name(stale)
    runtime.create_volume(volume, managed_labels(stale))
    foreign_volume = home_volume_name(foreign)
    assert msb("volume", "create", "--quiet", foreign_volume).returncode == 0
    # microVMs cannot boot everywhere; a failed boot still leaves the stopped record pruning judges
    args = ["create", loaded.reference, "--name", vm_name(stale), "--pull", "never", "--quiet",
            "--mount-named", f"{volume}:/home/dev"]
    for key, value in managed_labels(stale).items():
        args += ["--label", f"{key}={value}"]
    msb(*args)
    if runtime.get_sandbox(vm_name(stale)) is None:
        pytest.skip("msb left no sandbox record behind (the VM booted and went away)")
    runtime.stop_sandbox(vm_name(stale))

    folder = tmp_path / "checkout"
    folder.mkdir()
    preview = run_cli("volume", "prune", "--dry-run", "-a", "0", cwd=folder)
    assert preview.returncode == 0, preview.stderr
    summary = preview.stdout.splitlines()[-1]
    assert summary == "dry-run: Would prune 1 VMs, 1 home volumes, 0 docker images, 0 msb images"
    assert runtime.get_sandbox(vm_name(stale)) is not None

    app = make_app(ScopedRuntime(runtime, token), tmp_path)  # type: ignore[arg-type]
    lines: list[str] = []
    outcome = prune(results_into(app, lines), "0", Scope.ALL, dry_run=False, force=True,
                    docker=DockerEngineImages(labels=run_labels(token)))
    assert {(r.kind, r.name) for r in outcome.plan} == {
        (ArtifactKind.VM, vm_name(stale)),
        (ArtifactKind.HOME_VOLUME, volume),
        (ArtifactKind.RUNTIME_IMAGE, image),
        (ArtifactKind.DOCKER_IMAGE, image),
    }
    assert outcome.failed == []
    assert lines[-1] == "Pruned 1 VMs, 1 home volumes, 1 docker images, 1 msb images"
    assert runtime.get_sandbox(vm_name(stale)) is None
    volumes = {entry["name"] for entry in json.loads(msb("volume", "list", "--format", "json").stdout)}
    assert volumes == {foreign_volume}
    images = {entry["reference"] for entry in json.loads(msb("image", "list", "--format", "json").stdout)}
    assert image not in images and foreign_image in images
    assert not image_exists(image) and image_exists(foreign_image)


def _save(reference: str, folder: Path) -> Path:
    archive = folder / "foreign.tar"
    docker("save", "--output", str(archive), reference, check=True)
    return archive
