"""The launcher killed with SIGKILL at ten moments of its work.

A `docker` wrapper first on the launcher's PATH recognises the Docker sub-command of one
moment, touches a file and sleeps, either before the real command runs or right after it
finished. The moments the launcher reaches through the engine's socket (execs, starts) are
held the same way by a relay in front of the socket. The test then kills the launcher's
whole process group. Afterwards the next plain
run works, the state file names a complete home volume, and every artifact of the project
is in use, planned by `prune`, or gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import LABEL_MANAGED, LABEL_SLUG, home_volume_name, managed_labels
from opencode_sandbox.state.store import StateStore
from tests.e2e.harness import Project, docker
from tests.fixtures.engine_relay import holding_relay
from tests.services.test_volumes_integration import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

FIRST_RUN = ("shell", "--", "true")


@dataclass(frozen=True)
class KillPoint:
    name: str
    pattern: str
    """Matched against the wrapper's arguments; `*` stands for any text."""
    after: bool
    """Kill right after the real command finished instead of before it starts."""
    command: tuple[str, ...] = FIRST_RUN
    prepare: str = "fresh"
    """fresh: nothing exists yet; stopped: the project ran once and its VM is stopped."""
    request: str | None = None
    """Instead of a `docker` command: a regular expression over a request to the engine's socket."""


POINTS = [
    KillPoint("image-build", "build *", after=False),
    KillPoint("image-built", "build *", after=True),
    KillPoint("home-volume-fill", f"run --rm *{LABEL_MANAGED}=helper *--entrypoint true*", after=False),
    KillPoint("home-volume-filled", f"run --rm *{LABEL_MANAGED}=helper *--entrypoint true*", after=True),
    KillPoint("vm-create", "run *--detach --name opencode-sandbox-vm-*", after=False),
    KillPoint("vm-created", "run *--detach --name opencode-sandbox-vm-*", after=True),
    KillPoint("provisioning", "", after=False, request=r'^POST /containers/[^ ]+/exec .*"Cmd":\s*\["tar",\s*"-x"'),
    KillPoint("daemon-start", "", after=False, request=r"^POST /containers/[^ ]+/exec .*OPENCODE_SERVER_PASSWORD=",
              command=("run", "--serve-only")),  # a shell starts no server
    KillPoint("vm-start", "", after=False, prepare="stopped",
              request=r"^POST /containers/opencode-sandbox-vm-[^ ]+/start "),
    KillPoint("volume-migrate-copy", f"run --rm *{LABEL_MANAGED}=helper *--entrypoint cp*", after=False,
              command=("volume", "migrate", "--rm"), prepare="stopped"),
    KillPoint("volume-reset-fill", f"run --rm *{LABEL_MANAGED}=helper *--entrypoint true*", after=False,
              command=("volume", "reset", "--rm"), prepare="stopped"),
]


def docker_wrapper(folder: Path, point: KillPoint, marker: Path) -> Path:
    real = shutil.which("docker")
    assert real is not None
    folder.mkdir()
    if point.after:
        matched = f'"{real}" "$@"; status=$?; touch "{marker}"; sleep 300; exit $status'
    else:
        matched = f'touch "{marker}"; sleep 300'
    pattern = "*".join(f"'{part}'" if part else "" for part in point.pattern.split("*"))
    wrapper = folder / "docker"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in {pattern}) {matched};; esac\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return folder


def kill_at(project: Project, point: KillPoint, tmp_path: Path) -> None:
    marker = tmp_path / "reached"
    if point.request is None:
        wrapper = docker_wrapper(tmp_path / "wrapper", point, marker)
        environment = {**os.environ, **project.env, "PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}"}
        launch_and_kill(project, point, environment, marker)
        return
    with holding_relay(tmp_path, point.request, marker) as docker_host:
        launch_and_kill(project, point, {**os.environ, **project.env, "DOCKER_HOST": docker_host}, marker)


def launch_and_kill(project: Project, point: KillPoint, environment: dict[str, str], marker: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "opencode_sandbox", *point.command], cwd=project.root, env=environment,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        wait_for(marker.exists, 300, process)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def provide_opencode_config() -> None:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "AGENTS.md").write_text("Keep answers short.\n")


def listing(*args: str) -> list[str]:
    return docker(*args).stdout.split()


def entries(image_or_volume: str, volume: bool) -> set[str]:
    if volume:
        result = docker("run", "--rm", "--network", "none", "--mount",
                        f"type=volume,source={image_or_volume},target=/d,readonly",
                        "debian:trixie-slim", "ls", "-A", "/d")
    else:
        result = docker("run", "--rm", "--network", "none", "--user", "root", "--entrypoint", "ls",
                        image_or_volume, "-A", "/home/dev")
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def project_artifacts(project: Project) -> dict[str, set[str]]:
    """Each artifact of the project by a key, with the names `prune` may print it under."""
    found: dict[str, set[str]] = {}
    volumes = project.home_volumes()
    for volume in volumes:
        found[f"volume {volume}"] = {volume}
    containers = set(listing("ps", "-a", "--quiet", "--filter", f"label={LABEL_SLUG}={project.slug}"))
    for volume in volumes:
        containers |= set(listing("ps", "-a", "--quiet", "--filter", f"volume={volume}"))
    for container in containers:
        name = docker("inspect", "--format", "{{.Name}}", container).stdout.strip().lstrip("/")
        found[f"container {name}"] = {name}
    for image in set(listing("images", "--quiet", "--no-trunc", "--filter", f"label={LABEL_SLUG}={project.slug}")):
        tags = docker("image", "inspect", "--format", "{{range .RepoTags}}{{.}} {{end}}", image).stdout.split()
        found[f"image {image}"] = {image, *tags}
    return found


def in_use(project: Project, state_volume: str) -> set[str]:
    vm_image = docker("inspect", "--format", "{{.Image}}", project.vm).stdout.strip()
    return {f"volume {state_volume}", f"container {project.vm}", f"image {vm_image}"}


def planned(project: Project) -> str:
    preview = project.cli("prune", "--dry-run", "-a", "0")
    assert preview.returncode == 0, preview.stderr
    return preview.stdout


def unaccounted(artifacts: dict[str, set[str]], excluded: set[str], plan: str) -> set[str]:
    return {key for key, names in artifacts.items()
            if key not in excluded and not any(name in plan for name in names)}


@pytest.mark.parametrize("point", POINTS, ids=[point.name for point in POINTS])
def test_a_killed_launcher_leaves_a_usable_project(project: Project, point: KillPoint, tmp_path: Path) -> None:
    provide_opencode_config()
    if point.prepare == "stopped":
        assert project.shell("true").returncode == 0
        docker("stop", "--time", "1", project.vm, check=True)

    kill_at(project, point, tmp_path)

    again = project.shell("test -f ~/.config/opencode/AGENTS.md && echo provisioned")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "provisioned\n"
    assert "Traceback" not in again.stderr
    state = StateStore(project.state_dir.parent).load(project.slug)
    assert state.home_volume is not None and state.home_volume in project.home_volumes()
    assert state.image_reference is not None
    assert entries(state.image_reference, volume=False) <= entries(state.home_volume, volume=True)
    assert project.container_state() == "running"

    artifacts = project_artifacts(project)
    waiting = unaccounted(artifacts, in_use(project, state.home_volume), planned(project))
    docker("stop", "--time", "1", project.vm, check=True)
    # A stopped VM is stale at age 0: whatever it leaves behind must now be planned too.
    left = unaccounted({key: artifacts[key] for key in waiting}, set(), planned(project))
    assert left == set(), f"prune would never find: {sorted(left)}"


def test_a_leftover_home_volume_name_is_skipped(project: Project) -> None:
    now = datetime.now(UTC)
    taken = [home_volume_name(project.slug, now + timedelta(seconds=offset)) for offset in range(-1, 30)]
    for name in taken:
        labels = [arg for key, value in managed_labels(project.slug).items() for arg in ("--label", f"{key}={value}")]
        docker("volume", "create", *labels, name, check=True)
    result = project.shell("true")
    assert result.returncode == 0, result.stderr
    state = StateStore(project.state_dir.parent).load(project.slug)
    assert state.home_volume is not None and state.home_volume not in taken
