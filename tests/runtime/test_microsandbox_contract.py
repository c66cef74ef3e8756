"""The runtime contract, run against the real msb in the test's temporary MSB_HOME."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.errors import RuntimeUnavailable
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from opencode_sandbox.runtime.microsandbox.kvm import probe_kvm
from opencode_sandbox.runtime.microsandbox.sdk_worker import call_sdk
from tests.fixtures.msb_store import MsbImageStore, seeded_msb_home
from tests.runtime.contract import PRIVATE_ADDRESS, Created, RuntimeContract, new_slug

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

    def address_refusals_unrecorded_reason(self) -> str | None:
        return "msb answers a connection its policy refuses by address with a reset and records nothing"

    def network_records(self, name: str) -> str:
        records = subprocess.run([str(locate_msb()), "logs", "--source", "system", "--json", "--trace", name],
                                 capture_output=True, text=True, timeout=120)
        lines = [line for line in records.stdout.splitlines() if "microsandbox_network" in line]
        return "\n".join(lines)[-30000:] + records.stderr[-2000:]

    def prepares_no_commands_reason(self) -> str | None:
        return "`msb exec` makes the process as it runs it"

    def dev_identity_ignored_reason(self) -> str | None:
        return ("msb maps the invoking host user to dev and ignores SandboxSpec.dev_identity: "
                "the lab's run as an ordinary user (`kvm-lab.sh --user`) covers another host user")

    @pytest.mark.needs_boot
    def test_refused_names_are_listed_under_none(self, runtime: MicrosandboxRuntime, contract_image: str,
                                                 created: Created, workspace: Path) -> None:
        spec = self.spec(new_slug(), contract_image, workspace)._replace(network=EgressPolicy(Profile.NONE))
        created.sandbox(spec)
        connect = runtime.exec(spec.name, ["bash", "-c", f"exec 3<>/dev/tcp/{PRIVATE_ADDRESS}/9"], timeout_s=60)
        lookup = runtime.exec(spec.name, ["getent", "hosts", "denied.example.org"], timeout_s=60)
        records = self.network_records(spec.name)
        assert connect.exit_code != 0 and lookup.exit_code != 0, (connect, lookup, records)
        before = datetime.now(UTC) - timedelta(minutes=5)
        found = {refusal.destination: refusal for refusal in runtime.refusals(spec.name)}
        assert found["denied.example.org"].protocol == "dns", records
        assert found["denied.example.org"].attempts >= 1
        last_seen = found["denied.example.org"].last_seen
        assert last_seen is not None and before <= last_seen <= datetime.now(UTC) + timedelta(minutes=5)
        runtime.stop_sandbox(spec.name, timeout_s=5)
        assert runtime.refusals(spec.name) == []

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
