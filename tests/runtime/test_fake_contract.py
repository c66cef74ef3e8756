"""The runtime contract, run against the in-memory fake so it stays a faithful stand-in."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from opencode_sandbox.runtime.docker.owner import DockerOwner, RecordedHome
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.select import describe
from tests.fakes.runtime import FakeNode, FakeRuntime, Tree, dev_home_files
from tests.runtime.contract import CONTRACT_FILES
from tests.runtime.ownership_contract import ActingFor, OwnershipContract


def contract_tree() -> Tree:
    files = dev_home_files()
    for item in CONTRACT_FILES:
        files[item.path] = FakeNode(item.kind, item.owner, item.mode, item.content)
    return files


class FakeForeignArtifacts:
    def __init__(self, runtime: FakeRuntime, image: str) -> None:
        self.runtime = runtime
        self.image = image

    def sandbox(self, name: str, labels: dict[str, str] | None = None, mounts: tuple[str, ...] = ()) -> None:
        self.runtime.add_foreign_sandbox(name, labels, image=self.image, mounts=mounts)

    def volume(self, name: str, labels: dict[str, str]) -> None:
        self.runtime.add_foreign_volume(name, labels)

    def sandbox_exists(self, name: str) -> bool:
        return name in self.runtime.sandboxes

    def volume_exists(self, name: str) -> bool:
        return name in self.runtime.volumes


class TestFakeContract(OwnershipContract):
    @pytest.fixture
    def runtime(self) -> Iterator[FakeRuntime]:
        fake = FakeRuntime()
        try:
            yield fake
        finally:
            fake.close()

    @pytest.fixture
    def acting_for(self, runtime: FakeRuntime) -> ActingFor:
        def act(recorded_home: RecordedHome | None) -> FakeRuntime:
            runtime.owner = DockerOwner(recorded_home=recorded_home)
            return runtime

        return act

    @pytest.fixture
    def contract_image(self, runtime: FakeRuntime) -> str:
        reference = "fake-registry/contract:latest"
        runtime.add_docker_image(reference, contract_tree())
        return reference

    @pytest.fixture
    def spare_image(self, runtime: FakeRuntime) -> str:
        reference = f"opencode-sandbox/runner-contract-{uuid.uuid4().hex[:14]}:spare"
        runtime.add_docker_image(reference, contract_tree(), image_id=self.SPARE_IMAGE_ID)
        return reference

    SPARE_IMAGE_ID = "sha256:" + "5a" * 32

    @pytest.fixture
    def spare_image_id(self, spare_image: str) -> str:
        return self.SPARE_IMAGE_ID

    @pytest.fixture
    def foreign(self, runtime: FakeRuntime, contract_image: str) -> FakeForeignArtifacts:
        return FakeForeignArtifacts(runtime, contract_image)


def test_the_fake_answers_as_the_backend_of_the_kind_it_stands_for() -> None:
    fake = FakeRuntime(RuntimeKind.MICROSANDBOX)
    try:
        assert fake.description is describe(RuntimeKind.MICROSANDBOX)
        fake.kind = RuntimeKind.DOCKER  # a test may turn it into the other runtime
        assert fake.description is describe(RuntimeKind.DOCKER)
    finally:
        fake.close()
