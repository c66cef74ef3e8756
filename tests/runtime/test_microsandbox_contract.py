"""The runtime contract, run against the real msb in the test's temporary MSB_HOME."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from opencode_sandbox.errors import RuntimeUnavailable
from opencode_sandbox.runtime.kvm import probe_kvm
from opencode_sandbox.runtime.microsandbox_backend import MicrosandboxRuntime
from opencode_sandbox.runtime.msb_cli import locate_msb
from opencode_sandbox.runtime.msb_sdk_worker import call_sdk
from tests.fixtures.msb_store import MsbImageStore, seeded_msb_home
from tests.runtime.contract import RuntimeContract

pytestmark = [pytest.mark.msb, pytest.mark.docker]


def msb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(locate_msb()), *args], capture_output=True, text=True, check=False)


class MsbForeignArtifacts:
    """Look-alike sandboxes and volumes made with msb itself, removed afterwards."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.sandboxes: list[str] = []
        self.volumes: list[str] = []

    def sandbox(self, name: str) -> None:
        self.sandboxes.append(name)
        # Where VMs cannot boot, msb still keeps the (stopped) record.
        created = msb("create", self.image, "--name", name, "--pull", "never", "--quiet")
        assert self.sandbox_exists(name), created.stdout + created.stderr

    def volume(self, name: str, labels: dict[str, str]) -> None:
        self.volumes.append(name)
        call_sdk("create-volume", {"name": name, "labels": labels})

    def sandbox_exists(self, name: str) -> bool:
        return msb("inspect", name, "--format", "json").returncode == 0

    def volume_exists(self, name: str) -> bool:
        return msb("volume", "inspect", name).returncode == 0

    def cleanup(self) -> None:
        for name in self.sandboxes:
            msb("remove", "--force", "--quiet", name)
        for name in self.volumes:
            msb("volume", "remove", "--quiet", name)


class TestMicrosandboxContract(RuntimeContract):
    def boot_unavailable_reason(self) -> str | None:
        check = probe_kvm()
        return None if check.ok else f"microVMs cannot boot here: {check.cause}"

    def network_records(self, name: str) -> str:
        records = subprocess.run([str(locate_msb()), "logs", "--source", "system", "--json", "--debug", name],
                                 capture_output=True, text=True, timeout=120)
        return records.stdout[-20000:] + records.stderr[-2000:]

    def dev_identity_ignored_reason(self) -> str | None:
        return ("msb maps the invoking host user to dev and ignores SandboxSpec.dev_identity: "
                "the lab's run as an ordinary user (`kvm-lab.sh --user`) covers another host user")

    def test_check_available(self, runtime: MicrosandboxRuntime) -> None:  # type: ignore[override]
        reason = self.boot_unavailable_reason()
        if reason is None:
            runtime.check_available()
            return
        with pytest.raises(RuntimeUnavailable) as raised:
            runtime.check_available()
        assert raised.value.hint and "--runtime docker" in raised.value.hint

    @pytest.fixture
    def runtime(self) -> MicrosandboxRuntime:
        return MicrosandboxRuntime()

    @pytest.fixture
    def contract_image(self, runtime: MicrosandboxRuntime, docker_contract_image: str,
                       msb_image_store: MsbImageStore) -> Iterator[str]:
        """The contract image, loaded into this test's runtime home: seeded from the session's store,
        so the load below finds it there."""
        msb_image_store.load(docker_contract_image)
        seeded_msb_home(msb_image_store)
        assert runtime.loaded_image(docker_contract_image) is not None
        runtime.load_image(docker_contract_image)
        yield docker_contract_image
        msb("image", "remove", "--force", "--quiet", docker_contract_image)

    @pytest.fixture
    def spare_image(self, docker_spare_image: str) -> Iterator[str]:
        yield docker_spare_image
        msb("image", "remove", "--force", "--quiet", docker_spare_image)

    @pytest.fixture
    def foreign(self, contract_image: str) -> Iterator[MsbForeignArtifacts]:
        made = MsbForeignArtifacts(contract_image)
        try:
            yield made
        finally:
            made.cleanup()
