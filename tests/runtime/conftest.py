"""Fixtures shared by the runtime backend tests: a contract image built in the Docker engine."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_boot: needs a sandbox that boots (skipped where the runtime cannot)"
    )


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def docker(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["docker", *args], input=stdin, capture_output=True, check=False)


def build_image(tag: str, dockerfile: str, folder: Path) -> None:
    (folder / "Dockerfile").write_text(dockerfile)
    built = docker("build", "--quiet", "--tag", tag, str(folder))
    if built.returncode != 0:
        raise RuntimeError(built.stderr.decode(errors="replace"))


@pytest.fixture(scope="session")
def docker_contract_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Docker engine image with the contract's `dev` home, removed after the session."""
    # Imported here: the contract's markers need `pytest_configure` below to have run.
    from tests.runtime.contract import contract_dockerfile

    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    tag = f"opencode-sandbox-test/contract-{uuid.uuid4().hex[:10]}:latest"
    build_image(tag, contract_dockerfile(), tmp_path_factory.mktemp("contract-image"))
    try:
        yield tag
    finally:
        docker("image", "rm", "--force", tag)


@pytest.fixture
def docker_spare_image(docker_contract_image: str) -> Iterator[str]:
    """A tag of the contract image in this tool's namespace, for a test to load and remove."""
    tag = f"opencode-sandbox/runner-contract-{uuid.uuid4().hex[:14]}:spare"
    tagged = docker("tag", docker_contract_image, tag)
    assert tagged.returncode == 0, tagged.stderr
    try:
        yield tag
    finally:
        docker("image", "rm", tag)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The microsandbox contract's tests that boot a sandbox need KVM: `-m kvm` selects them."""
    for item in items:
        if item.get_closest_marker("needs_boot") and "microsandbox" in item.nodeid:
            item.add_marker(pytest.mark.kvm)
