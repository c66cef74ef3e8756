"""`build`, `build -n`, `build dockerfile` and `image build` through the CLI with the real engine."""

from __future__ import annotations

import json
import re

import pytest

from opencode_sandbox.images.updater import baked_version
from tests.e2e.harness import Project, docker

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def test_build_dockerfile_prints_the_effective_dockerfile(project: Project) -> None:
    default = project.cli("build", "dockerfile")
    assert default.returncode == 0
    assert default.stdout == "FROM opencode-sandbox/runner-base:latest\n"
    dind = project.cli("build", "--dind", "dockerfile")
    assert dind.stdout == "FROM opencode-sandbox/runner-base-dind:latest\n"
    project.write_dockerfile("FROM opencode-sandbox/runner-base:latest\nUSER root\nRUN true\nUSER dev\n")
    custom = project.cli("build", "dockerfile")
    assert custom.stdout == "FROM opencode-sandbox/runner-base:latest\nUSER root\nRUN true\nUSER dev\n"


def test_build_dry_run_then_build_then_skip(project: Project) -> None:
    version = (project.state_dir.parent / "updater.yaml").read_text()
    assert "baked_version" in version
    planned = project.cli("build", "-n", "--opencode-version", _baked(project))
    assert planned.returncode == 0, planned.stderr
    assert "build: opencode-sandbox/runner-" in planned.stdout
    assert docker("images", "-q", f"opencode-sandbox/runner-{project.slug}").stdout.strip() == ""

    assert not project.state_dir.exists()
    built = project.cli("build", "--opencode-version", _baked(project))
    assert built.returncode == 0, built.stderr
    assert " built (opencode " in built.stdout
    assert project.state_dir.is_dir()  # a project this user knows: pruning may judge its images
    found = re.search(r"(opencode-sandbox/runner-\S+) built", built.stdout)
    assert found is not None
    for runtime, loaded in (("microsandbox", False), ("docker", True)):
        listed = project.cli("--runtime", runtime, "image", "list", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        entries = {entry["reference"]: entry for entry in json.loads(listed.stdout)["result"]}
        assert entries[found.group(1)]["loaded"] is loaded, runtime
        assert entries[found.group(1)]["project"] == project.slug
    again = project.cli("image", "build", "--opencode-version", _baked(project))
    assert again.returncode == 0
    assert " up to date (opencode " in again.stdout


@pytest.mark.msb
def test_build_on_microsandbox_leaves_the_image_loaded(project: Project) -> None:
    version = _baked(project)
    on_docker = project.cli("--runtime", "docker", "build", "--opencode-version", version)
    assert on_docker.returncode == 0, on_docker.stderr
    found = re.search(r"(opencode-sandbox/runner-\S+) built \(opencode ", on_docker.stdout)
    assert found is not None, on_docker.stdout
    reference = found.group(1)

    planned = project.cli("--runtime", "microsandbox", "build", "-n", "--opencode-version", version)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines()[-2:] == [
        "nothing to build", f"load: {reference} into microsandbox (not loaded yet)"
    ]

    loaded = project.cli("--runtime", "microsandbox", "build", "--opencode-version", version)
    assert loaded.returncode == 0, loaded.stderr
    assert f"{reference} up to date, loaded into microsandbox (opencode {version}, " in loaded.stdout
    assert f"Loading {reference} into microsandbox..." in loaded.stderr
    listed = project.cli("--runtime", "microsandbox", "image", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert {entry["reference"]: entry["loaded"] for entry in json.loads(listed.stdout)["result"]}[reference] is True

    again = project.cli("--runtime", "microsandbox", "build", "--opencode-version", version)
    assert again.returncode == 0, again.stderr
    assert f"{reference} up to date (opencode {version}, " in again.stdout
    assert "Loading" not in again.stderr
    replanned = project.cli("--runtime", "microsandbox", "build", "-n", "--opencode-version", version)
    assert replanned.stdout.splitlines()[-1] == "nothing to build"


def test_build_refuses_a_final_root_user(project: Project) -> None:
    project.write_dockerfile("FROM opencode-sandbox/runner-base:latest\nUSER root\n")
    result = project.cli("build", "--opencode-version", _baked(project))
    assert result.returncode == 2
    assert "USER dev" in result.stderr
    assert "Traceback" not in result.stderr


def test_failing_run_step_names_the_step_and_keeps_the_previous_image(project: Project) -> None:
    assert project.cli("build", "--opencode-version", _baked(project)).returncode == 0
    before = docker("images", "-q", f"opencode-sandbox/runner-{project.slug}").stdout.split()
    project.write_dockerfile("FROM opencode-sandbox/runner-base:latest\nRUN echo broken-step && exit 3\n")
    result = project.cli("build", "--opencode-version", _baked(project))
    assert result.returncode == 1
    assert "broken-step" in result.stderr
    after = docker("images", "-q", f"opencode-sandbox/runner-{project.slug}").stdout.split()
    assert set(before) <= set(after)


def _baked(project: Project) -> str:
    version = baked_version(project.state_dir.parent)
    assert version, "no baked version recorded"
    return version
