"""Pruning real projects on either runtime: a stopped project goes, a running one and every
look-alike that is not this tool's stay.

The Docker engine is shared with other users: a full `prune --force` would also take their
dangling runner images and the egress proxy images no container runs on (rules 9 and 10 of
core/prune_plan.py), so the whole plan is checked with a dry run and the removal runs in the
volumes scope, which touches this user's projects only."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import PROXY_REPOSITORY, home_volume_name, runner_image, runner_repository
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from tests.e2e.conftest import seed_runner_layers
from tests.e2e.harness import Project, docker, project_on
from tests.fixtures.images import DEBIAN_BASE, RunnerBase

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(2400)]

PLAN_LINE = re.compile(r"  (vm|home volume|docker image|msb image)\s+(\S+)\s+\((.+)\)")


def msb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(locate_msb()), *args], capture_output=True, text=True, check=False, timeout=300)


class Foreign:
    """Look-alikes of this tool's artifacts without its labels: a home volume and a runner image."""

    def __init__(self, runtime: str, token: str) -> None:
        self.runtime = runtime
        self.volume = home_volume_name(f"{token}-foreign")
        self.image = runner_image(f"{token}-foreign", "x")
        if runtime == "docker":
            assert docker("volume", "create", self.volume).returncode == 0
        else:
            assert msb("volume", "create", "--quiet", self.volume).returncode == 0
        assert docker("tag", DEBIAN_BASE, self.image).returncode == 0

    def volume_exists(self) -> bool:
        if self.runtime == "docker":
            return docker("volume", "inspect", self.volume).returncode == 0
        return msb("volume", "inspect", self.volume).returncode == 0

    def image_exists(self) -> bool:
        return docker("image", "inspect", self.image).returncode == 0

    def remove(self) -> None:
        if self.runtime == "docker":
            docker("volume", "rm", "-f", self.volume)
        else:
            msb("volume", "remove", "--quiet", self.volume)
        docker("image", "rm", self.image)  # the tag only: the Debian image stays


@pytest.fixture
def two_projects(request: pytest.FixtureRequest, runtime: str, tmp_path: Path, unique: str,
                 runner_base_image: RunnerBase, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Project, Project]]:
    """Two projects of the test's user on `runtime`: both known to its pruning."""
    if runtime == "microsandbox":
        seed_runner_layers(request.getfixturevalue("msb_image_store"), runner_base_image)
    made: list[Project] = []
    try:
        for role in ("stale", "live"):
            made.append(project_on(runtime, tmp_path / f"{role} {unique}", f"{unique}-{role}",
                                   runner_base_image.opencode_version, monkeypatch))
        yield made[0], made[1]
    finally:
        for project in made:
            project.cleanup()


def planned(output: str) -> set[tuple[str, str]]:
    return {(found.group(1), found.group(2)) for found in map(PLAN_LINE.fullmatch, output.splitlines()) if found}


def runner_images(project: Project) -> list[str]:
    listed = docker("images", "--format", "{{.Repository}}:{{.Tag}}", runner_repository(project.slug)).stdout
    return listed.split()


def test_prune_plans_and_removes_exactly_the_stopped_project(runtime: str, two_projects: tuple[Project, Project],
                                                              unique: str) -> None:
    stale, live = two_projects
    for project in (stale, live):
        assert project.shell("echo kept > ~/note").returncode == 0, project.vm
    assert stale.cli("stop").returncode == 0
    [stale_volume] = stale.home_volumes()
    [live_volume] = live.home_volumes()
    stale_images = runner_images(stale)
    assert stale_images
    foreign = Foreign(runtime, unique)
    try:
        preview = stale.cli("prune", "--dry-run", "-a", "0")
        assert preview.returncode == 0, preview.stderr
        plan = planned(preview.stdout)
        expected = {("vm", stale.vm), ("home volume", stale_volume)} | {("docker image", i) for i in stale_images}
        if runtime == "microsandbox":
            expected |= {("msb image", i) for i in stale_images}
        assert {entry for entry in plan if stale.slug in entry[1]} == expected
        others = plan - expected
        # images of the shared engine no container runs on: never anything of this test
        assert all(kind == "docker image" and name.startswith(("sha256:", PROXY_REPOSITORY + ":"))
                   for kind, name in others), others
        assert not any(live.slug in name or f"{unique}-foreign" in name for _, name in plan)

        removed = stale.cli("volume", "prune", "-a", "0", "--force")
        assert removed.returncode == 0, removed.stderr
        assert planned(removed.stdout) == {("vm", stale.vm), ("home volume", stale_volume)}
        assert removed.stdout.splitlines()[-1] == "Pruned 1 VMs, 1 home volumes, 0 docker images, 0 msb images"
        assert stale.vms() == [] and stale.home_volumes() == []
        assert not (stale.state_dir / "state.yaml").exists()
        assert runner_images(stale) == stale_images, "the volumes scope leaves images alone"
        assert live.vm_running() and live.home_volumes() == [live_volume]
        assert foreign.volume_exists() and foreign.image_exists()
    finally:
        foreign.remove()

    again = live.shell("cat ~/note")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "kept\n"
