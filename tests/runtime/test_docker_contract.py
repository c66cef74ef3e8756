"""The runtime contract, run against the real Docker engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.docker.owner import DockerOwner
from opencode_sandbox.runtime.types import SandboxInfo
from tests.runtime.conftest import docker
from tests.runtime.ownership_contract import ActingFor, OwnershipContract

pytestmark = pytest.mark.docker


class DockerForeignArtifacts:
    """Look-alike containers and volumes made with plain `docker`, removed afterwards."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.containers: list[str] = []
        self.volumes: list[str] = []

    def sandbox(self, name: str, labels: dict[str, str] | None = None, mounts: tuple[str, ...] = ()) -> None:
        self.containers.append(name)
        label_args = [arg for key, value in (labels or {}).items() for arg in ("--label", f"{key}={value}")]
        mount_args = [arg for index, volume in enumerate(mounts)
                      for arg in ("--mount", f"type=volume,source={volume},target=/mnt/{index}")]
        made = docker("create", "--name", name, *label_args, *mount_args, self.image)
        assert made.returncode == 0, made.stderr

    def volume(self, name: str, labels: dict[str, str]) -> None:
        self.volumes.append(name)
        label_args = [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
        made = docker("volume", "create", *label_args, name)
        assert made.returncode == 0, made.stderr

    def sandbox_exists(self, name: str) -> bool:
        return docker("container", "inspect", name).returncode == 0

    def volume_exists(self, name: str) -> bool:
        return docker("volume", "inspect", name).returncode == 0

    def cleanup(self) -> None:
        for name in self.containers:
            docker("rm", "--force", name)
        for name in self.volumes:
            docker("volume", "rm", "--force", name)


class TestDockerContract(OwnershipContract):
    @pytest.fixture
    def runtime(self) -> DockerRuntime:
        return DockerRuntime()

    @pytest.fixture
    def acting_for(self) -> ActingFor:
        return lambda recorded_home: DockerRuntime(owner=DockerOwner(recorded_home=recorded_home))

    @pytest.mark.needs_boot
    def test_through_the_docker_command_an_exec_holds_no_more_than_its_limit_either(
            self, runtime: DockerRuntime, running: SandboxInfo) -> None:
        runtime.cli.give_up_socket()  # as where the engine's socket cannot be reached
        self.test_an_exec_holds_no_more_of_either_stream_than_its_limit(runtime, running)

    @pytest.fixture
    def contract_image(self, docker_contract_image: str) -> str:
        return docker_contract_image

    @pytest.fixture
    def spare_image(self, docker_spare_image: str) -> str:
        return docker_spare_image

    @pytest.fixture
    def foreign(self, docker_contract_image: str) -> Iterator[DockerForeignArtifacts]:
        made = DockerForeignArtifacts(docker_contract_image)
        try:
            yield made
        finally:
            made.cleanup()
