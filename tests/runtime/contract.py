"""The behaviour every `Runtime` backend promises, as a test base class.

A backend's test module subclasses `RuntimeContract` and provides the fixtures:
- `runtime`: the backend under test;
- `contract_image`: an image reference the runtime can boot, holding `CONTRACT_FILES`
  (build it with `contract_dockerfile()`);
- `spare_image`: a Docker engine reference under `opencode-sandbox/runner-` that the test
  may load, list and remove (`spare_image_id`: its ID in the engine, asked of `docker` unless
  overridden);
- `foreign`: a `ForeignArtifacts` that makes look-alike artifacts without our labels.
Tests marked `needs_boot` skip when `boot_unavailable_reason()` returns a reason.
"""

from __future__ import annotations

import os
import socket
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.core.naming import (
    HOME_PREFIX,
    IMAGE_REPOSITORY_PREFIX,
    LABEL_MANAGED,
    LABEL_SLUG,
    home_volume_name,
    managed_labels,
    vm_name,
)
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.errors import BootFailed, NotFound, NotOurs, SandboxError, UsageError, VmDidNotBoot
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import (
    Mount,
    MountKind,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
)

GUEST_PORT = 4096
OTHER_HOST_ID = 1001
CLOCK_SLACK = timedelta(seconds=5)
PRIVATE_ADDRESS = "10.254.77.9"
"""An address in a private range that nothing on a test host uses."""


@dataclass(frozen=True)
class ContractFile:
    path: str
    kind: str
    """"dir", "file" or "link"."""
    owner: str
    mode: int
    content: str = ""
    """The text of a file, the target of a link."""


CONTRACT_FILES: tuple[ContractFile, ...] = (
    ContractFile("/home/dev", "dir", "dev", 0o755),
    ContractFile("/home/dev/.config", "dir", "dev", 0o700),
    ContractFile("/home/dev/.config/greeting", "file", "dev", 0o600, "hello from the image\n"),
    ContractFile("/home/dev/greeting.link", "link", "dev", 0o777, ".config/greeting"),
    ContractFile("/home/dev/system.txt", "file", "root", 0o644, "owned by root\n"),
    ContractFile("/workspace", "dir", "dev", 0o755),
)


def contract_dockerfile(base: str = "debian:trixie-slim") -> str:
    """A Dockerfile for an image with a `dev` user (uid 1000) and `CONTRACT_FILES`."""
    steps = ["useradd --create-home --uid 1000 --shell /bin/sh dev"]
    for item in CONTRACT_FILES:
        if item.kind == "dir":
            steps.append(f"mkdir -p {item.path}")
        elif item.kind == "file":
            text = item.content.replace("\\", "\\\\").replace("\n", "\\n")
            steps.append(f"printf '{text}' > {item.path}")
        else:
            steps.append(f"ln -s {item.content} {item.path}")
        steps.append(f"chown -h {item.owner}:{item.owner} {item.path}")
        if item.kind != "link":
            steps.append(f"chmod {item.mode:o} {item.path}")
    body = " \\\n && ".join(steps)
    return f"FROM {base}\nRUN {body}\nUSER dev\nWORKDIR /workspace\nCMD [\"sh\"]\n"


class ForeignArtifacts(Protocol):
    """Makes artifacts with our names but without our labels, as another tool might."""

    def sandbox(self, name: str) -> None:
        """A sandbox (stopped is enough) created from the contract image."""
    def volume(self, name: str, labels: dict[str, str]) -> None: ...
    def sandbox_exists(self, name: str) -> bool: ...
    def volume_exists(self, name: str) -> bool: ...


def new_slug() -> str:
    return "contract-" + uuid.uuid4().hex[:14]


class Created:
    """Everything a test creates through the runtime, removed at teardown whatever happened."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.sandboxes: list[str] = []
        self.volumes: list[str] = []

    def volume(self, slug: str, minute: int = 0) -> str:
        name = home_volume_name(slug, datetime(2030, 1, 1, 0, minute, tzinfo=UTC))
        self.volumes.append(name)
        self.runtime.create_volume(name, managed_labels(slug))
        return name

    def sandbox(self, spec: SandboxSpec) -> SandboxInfo:
        self.sandboxes.append(spec.name)
        return self.runtime.create_sandbox(spec)

    def cleanup(self) -> None:
        for name in self.sandboxes:
            try:
                if self.runtime.get_sandbox(name) is not None:
                    self.runtime.kill_sandbox(name)
                    self.runtime.remove_sandbox(name)
            except SandboxError:
                pass
        for name in self.volumes:
            try:
                if self.runtime.get_volume(name) is not None:
                    self.runtime.remove_volume(name)
            except SandboxError:
                pass


def _local_address() -> str | None:
    """A non-loopback address of this host, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


class RuntimeContract:
    """Subclass it and provide `runtime`, `contract_image`, `spare_image` and `foreign`."""

    def boot_unavailable_reason(self) -> str | None:
        """Why sandboxes cannot boot on this host, or None when they can."""
        return None

    def network_log_unavailable_reason(self) -> str | None:
        """Why this runtime cannot list what its network policy refused, or None when it can."""
        return None

    def dev_identity_ignored_reason(self) -> str | None:
        """Why this runtime ignores `SandboxSpec.dev_identity`, or None when it honours it."""
        return None

    def address_refusals_unrecorded_reason(self) -> str | None:
        """Why this runtime keeps no record of connections its policy refuses by address, or None."""
        return None

    def prepares_no_commands_reason(self) -> str | None:
        """Why this runtime makes no command ready before it runs (`prepare_command`), or None."""
        return None

    def network_records(self, name: str) -> str:
        """The runtime's own records of the sandbox's network, to show with a failure."""
        return ""

    @pytest.fixture(autouse=True)
    def _skip_without_boot(self, request: pytest.FixtureRequest) -> None:
        if request.node.get_closest_marker("needs_boot"):
            reason = self.boot_unavailable_reason()
            if reason:
                pytest.skip(reason)

    @pytest.fixture
    def spare_image_id(self, spare_image: str) -> str:
        import subprocess

        return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", spare_image], capture_output=True,
                              text=True, check=True).stdout.strip()

    @pytest.fixture
    def created(self, runtime: Runtime) -> Iterator[Created]:
        made = Created(runtime)
        try:
            yield made
        finally:
            made.cleanup()

    @pytest.fixture
    def workspace(self, tmp_path: Path) -> Path:
        folder = tmp_path / "checkout"
        folder.mkdir()
        (folder / "README.md").write_text("the checkout\n")
        return folder

    def spec(
        self,
        slug: str,
        image: str,
        workspace: Path,
        home: str | None = None,
        ports: tuple[int, ...] = (),
        dev_identity: tuple[int, int] | None = None,
    ) -> SandboxSpec:
        mounts = [Mount(MountKind.BIND, str(workspace), "/workspace")]
        if home is not None:
            mounts.append(Mount(MountKind.VOLUME, home, "/home/dev"))
        return SandboxSpec(
            name=vm_name(slug),
            image=image,
            cpus=1,
            memory_mib=256,
            env={"PROJECT_GREETING": "hi there"},
            labels={**managed_labels(slug), "org.opencode-sandbox.image": image},
            mounts=tuple(mounts),
            published_ports=ports,
            dev_identity=dev_identity,
        )

    # --- sandboxes -----------------------------------------------------------------------

    def test_it_answers_for_itself_as_the_backend_of_its_kind(self, runtime: Runtime) -> None:
        from opencode_sandbox.runtime.select import describe

        answers = runtime.description
        assert answers.kind is runtime.kind and answers is describe(runtime.kind)
        open_policy = EgressPolicy(Profile.ALL)
        assert answers.refusal(EgressPolicy(Profile.PUBLIC), privileged=False) is None
        assert answers.refusal(open_policy, privileged=True) is None  # a privileged VM with no rules to keep
        assert not answers.intercepts_tls(open_policy)
        assert answers.fingerprint_values(4096) != answers.fingerprint_values(512) or answers.pids_limit(512) is None
        assert answers.image_label and answers.volume_remove_command.split()[0] in ("docker", "msb")

    @pytest.mark.parametrize("profile", [Profile.PUBLIC, Profile.NONE])
    def test_a_secret_without_its_value_is_refused_before_anything_is_made(
        self, runtime: Runtime, workspace: Path, profile: Profile
    ) -> None:
        """A runtime that cannot keep secrets refuses them; one that can needs every value, and
        none can keep a secret under `none`. Either way before the image is even looked up."""
        slug = new_slug()
        secrets = parse_secrets({"CONTRACT_TOKEN": ["api.example.com"]})
        spec = self.spec(slug, f"{IMAGE_REPOSITORY_PREFIX}{slug}:absent", workspace)._replace(
            network=EgressPolicy(profile, secrets=secrets))
        with pytest.raises(UsageError):
            runtime.create_sandbox(spec, secret_values={"OTHER": "x"} if profile is Profile.PUBLIC
                                   else {"CONTRACT_TOKEN": "x"})
        assert runtime.get_sandbox(spec.name) is None

    def test_check_available(self, runtime: Runtime) -> None:
        runtime.check_available()

    def test_missing_sandbox(self, runtime: Runtime) -> None:
        name = vm_name(new_slug())
        assert runtime.get_sandbox(name) is None
        for operation in (
            runtime.start_sandbox,
            runtime.stop_sandbox,
            runtime.kill_sandbox,
            runtime.remove_sandbox,
        ):
            with pytest.raises(NotFound):
                operation(name)
        with pytest.raises(NotFound):
            runtime.host_port(name, GUEST_PORT)
        with pytest.raises(NotFound):
            runtime.port_map(name)
        with pytest.raises(NotFound):
            runtime.refusals(name)

    @pytest.mark.needs_boot
    def test_create_lists_with_labels_and_times(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        before = datetime.now(UTC) - CLOCK_SLACK
        info = created.sandbox(self.spec(slug, contract_image, workspace))
        after = datetime.now(UTC) + CLOCK_SLACK

        assert info.name == vm_name(slug)
        assert info.status is SandboxStatus.RUNNING
        assert info.image == contract_image
        assert info.labels[LABEL_MANAGED] == "true"
        assert info.labels[LABEL_SLUG] == slug
        assert info.labels["org.opencode-sandbox.image"] == contract_image
        assert info.created_at is not None and info.last_activity_at is not None
        assert info.created_at.tzinfo is not None
        assert info.created_at.utcoffset() == timedelta(0)
        assert before <= info.created_at <= after
        assert info.created_at <= info.last_activity_at <= after

        assert runtime.get_sandbox(info.name) == info
        listed = {sandbox.name: sandbox for sandbox in runtime.list_sandboxes()}
        assert listed[info.name].status is SandboxStatus.RUNNING
        assert runtime.sandbox_images()[info.name] == contract_image

    @pytest.mark.needs_boot
    def test_stop_start_kill_remove(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        info = created.sandbox(self.spec(new_slug(), contract_image, workspace))
        name = info.name
        assert info.last_activity_at is not None

        runtime.stop_sandbox(name, timeout_s=5)
        stopped = runtime.get_sandbox(name)
        assert stopped is not None and stopped.status is SandboxStatus.STOPPED
        assert stopped.last_activity_at is not None
        assert stopped.last_activity_at >= info.last_activity_at
        runtime.stop_sandbox(name)  # a stopped sandbox is left as it is
        assert runtime.get_sandbox(name) == stopped

        runtime.start_sandbox(name)
        running = runtime.get_sandbox(name)
        assert running is not None and running.status is SandboxStatus.RUNNING
        assert running.created_at == info.created_at

        runtime.kill_sandbox(name)
        killed = runtime.get_sandbox(name)
        assert killed is not None and killed.status is SandboxStatus.STOPPED

        runtime.start_sandbox(name)
        runtime.remove_sandbox(name)  # stops a running sandbox first
        assert runtime.get_sandbox(name) is None
        assert name not in {sandbox.name for sandbox in runtime.list_sandboxes()}

    @pytest.mark.needs_boot
    def test_create_refuses_an_existing_sandbox(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        spec = self.spec(new_slug(), contract_image, workspace)
        first = created.sandbox(spec)
        with pytest.raises(SandboxError) as raised:
            runtime.create_sandbox(spec)
        assert not isinstance(raised.value, NotOurs)
        again = runtime.get_sandbox(spec.name)
        assert again is not None and again.status is SandboxStatus.RUNNING
        assert again.created_at == first.created_at

    def test_boot_failure_with_missing_image_leaves_nothing(
        self, runtime: Runtime, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        missing = f"{IMAGE_REPOSITORY_PREFIX}{slug}:does-not-exist"
        with pytest.raises(BootFailed) as raised:
            created.sandbox(self.spec(slug, missing, workspace))
        assert raised.value.hint
        assert not isinstance(raised.value, VmDidNotBoot)  # another attempt cannot help
        assert runtime.get_sandbox(vm_name(slug)) is None
        assert vm_name(slug) not in {sandbox.name for sandbox in runtime.list_sandboxes()}

    def test_boot_failure_with_missing_mount_source_leaves_nothing(
        self, runtime: Runtime, contract_image: str, created: Created, tmp_path: Path
    ) -> None:
        slug = new_slug()
        with pytest.raises(BootFailed) as raised:
            created.sandbox(self.spec(slug, contract_image, tmp_path / "no-such-folder"))
        assert not isinstance(raised.value, VmDidNotBoot)
        assert runtime.get_sandbox(vm_name(slug)) is None

    def test_create_with_missing_home_volume_leaves_nothing(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        home = home_volume_name(slug)
        with pytest.raises((NotFound, BootFailed)):
            created.sandbox(self.spec(slug, contract_image, workspace, home=home))
        assert runtime.get_sandbox(vm_name(slug)) is None
        assert runtime.get_volume(home) is None

    # --- processes -----------------------------------------------------------------------

    @pytest.mark.needs_boot
    def test_refused_connections_are_listed_while_the_sandbox_runs(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        reason = self.network_log_unavailable_reason()
        if reason:
            pytest.skip(reason)
        spec = self.spec(new_slug(), contract_image, workspace)._replace(network=EgressPolicy(Profile.PUBLIC))
        created.sandbox(spec)
        assert runtime.refusals(spec.name) == []
        before = datetime.now(UTC) - CLOCK_SLACK
        refused = runtime.exec(spec.name, ["bash", "-c", f"exec 3<>/dev/tcp/{PRIVATE_ADDRESS}/9"], timeout_s=30)
        records = self.network_records
        assert refused.exit_code != 0 and "refused" in refused.stderr.lower(), (refused, records(spec.name))
        unrecorded = self.address_refusals_unrecorded_reason()
        if unrecorded:
            pytest.skip(unrecorded)
        refusals = runtime.refusals(spec.name)
        found = [(r.destination, r.protocol, r.port, r.attempts) for r in refusals]
        assert found == [(PRIVATE_ADDRESS, "tcp", 9, 1)], records(spec.name)
        assert refusals[0].last_seen is not None and before <= refusals[0].last_seen <= datetime.now(UTC) + CLOCK_SLACK
        runtime.stop_sandbox(spec.name, timeout_s=5)
        assert runtime.refusals(spec.name) == []

    @pytest.fixture
    def null_input(self) -> Iterator[None]:
        """Our fd 0 is /dev/null meanwhile: what runs on our fds has no input to take from the test's."""
        saved = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        try:
            yield
        finally:
            os.dup2(saved, 0)
            os.close(saved)

    @pytest.fixture
    def running(
        self, contract_image: str, created: Created, workspace: Path
    ) -> SandboxInfo:
        return created.sandbox(self.spec(new_slug(), contract_image, workspace))

    @pytest.mark.needs_boot
    def test_exec_exit_code_and_streams(self, runtime: Runtime, running: SandboxInfo) -> None:
        result = runtime.exec(running.name, ["sh", "-c", "echo out; echo err >&2; exit 7"])
        assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")

    @pytest.mark.needs_boot
    def test_an_exec_holds_no_more_of_either_stream_than_its_limit(self, runtime: Runtime,
                                                                   running: SandboxInfo) -> None:
        whole = runtime.exec(running.name, ["sh", "-c", "cat README.md; cat README.md >&2"], output_limit=13)
        assert (whole.stdout, whole.stderr) == ("the checkout\n", "the checkout\n")
        for script in ("cat README.md", "cat README.md >&2"):
            with pytest.raises(SandboxError, match="wrote more than 12 bytes, which are not read"):
                runtime.exec(running.name, ["sh", "-c", script], output_limit=12)

    @pytest.mark.needs_boot
    def test_exec_defaults_to_dev_in_the_checkout(
        self, runtime: Runtime, running: SandboxInfo
    ) -> None:
        assert runtime.exec(running.name, ["id", "-un"]).stdout == "dev\n"
        assert runtime.exec(running.name, ["pwd"]).stdout == "/workspace\n"
        readme = runtime.exec(running.name, ["cat", "README.md"])
        assert (readme.exit_code, readme.stdout) == (0, "the checkout\n")

    @pytest.mark.needs_boot
    def test_exec_user_workdir_env_stdin(self, runtime: Runtime, running: SandboxInfo) -> None:
        assert runtime.exec(running.name, ["id", "-un"], user="root").stdout == "root\n"
        assert runtime.exec(running.name, ["pwd"], workdir="/tmp").stdout == "/tmp\n"
        spec_env = runtime.exec(running.name, ["printenv", "PROJECT_GREETING"])
        assert spec_env.stdout == "hi there\n"
        extra = runtime.exec(running.name, ["printenv", "EXTRA"], env={"EXTRA": "a b=c"})
        assert extra.stdout == "a b=c\n"
        echoed = runtime.exec(running.name, ["cat"], stdin=b"line one\nline two\n")
        assert echoed.stdout == "line one\nline two\n"

    @pytest.mark.needs_boot
    def test_exec_in_the_checkout_writes_to_the_host(
        self, runtime: Runtime, running: SandboxInfo, workspace: Path
    ) -> None:
        result = runtime.exec(
            running.name, ["sh", "-c", "echo from inside > made.txt"], user="root"
        )
        assert result.exit_code == 0
        assert (workspace / "made.txt").read_text() == "from inside\n"

    @pytest.mark.needs_boot
    def test_files_made_in_the_checkout_keep_their_modes_on_the_host(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        identity = (os.getuid(), os.getgid())
        (workspace / "tool.sh").write_text("#!/bin/sh\n")
        (workspace / "tool.sh").chmod(0o644)
        info = created.sandbox(self.spec(new_slug(), contract_image, workspace, dev_identity=identity))
        script = (
            "umask 022 && echo text > plain.txt && mkdir folder && echo inner > folder/inner.txt"
            " && echo '#!/bin/sh' > run.sh && chmod 755 run.sh && chmod +x tool.sh"
        )
        made = runtime.exec(info.name, ["sh", "-c", script])
        assert made.exit_code == 0, made.stderr
        expected = {"plain.txt": 0o644, "folder": 0o755, "folder/inner.txt": 0o644, "run.sh": 0o755, "tool.sh": 0o755}
        found = {name: stat.S_IMODE((workspace / name).stat().st_mode) for name in expected}
        assert found == expected, f"modes on the host: { {name: oct(mode) for name, mode in found.items()} }"
        owners = {name: ((workspace / name).stat().st_uid, (workspace / name).stat().st_gid) for name in expected}
        assert owners == dict.fromkeys(expected, identity), f"owners on the host: {owners}"
        seen = runtime.exec(info.name, ["stat", "-c", "%n %a", *expected])
        in_guest = [f"{name} {mode:o}" for name, mode in expected.items()]
        assert seen.stdout.splitlines() == in_guest, f"modes in the VM: {seen.stdout}{seen.stderr}"

    @pytest.mark.needs_boot
    @pytest.mark.parametrize("owner", ["the invoking user", "another host user"])
    def test_dev_writes_the_checkout_and_home_as_the_host_user(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path, owner: str
    ) -> None:
        identity = (os.getuid(), os.getgid())
        if owner == "another host user":
            if reason := self.dev_identity_ignored_reason():
                pytest.skip(reason)
            if os.geteuid() != 0:
                pytest.skip("only root can hand a checkout to another host user")
            identity = (OTHER_HOST_ID, OTHER_HOST_ID)
            os.chown(workspace, *identity)
        slug = new_slug()
        home = created.volume(slug)
        runtime.fill_volume_from_image(home, contract_image, "/home/dev")
        info = created.sandbox(self.spec(slug, contract_image, workspace, home=home, dev_identity=identity))
        wrote = runtime.exec(info.name, ["sh", "-c", "echo by dev > by-dev.txt"])
        assert wrote.exit_code == 0, wrote.stderr
        made = workspace / "by-dev.txt"
        assert made.read_text() == "by dev\n"
        assert (made.stat().st_uid, made.stat().st_gid) == identity
        in_home = runtime.exec(info.name, ["sh", "-c", "echo mine >> /home/dev/.config/greeting"])
        assert in_home.exit_code == 0, in_home.stderr

    @pytest.mark.needs_boot
    def test_a_command_made_ready_runs_once_run_and_never_once_ended(
        self, runtime: Runtime, running: SandboxInfo, workspace: Path, null_input: None
    ) -> None:
        if reason := self.prepares_no_commands_reason():
            assert not runtime.description.prepares_commands
            assert runtime.prepare_command(running.name, ["true"]) is None
            pytest.skip(reason)
        assert runtime.description.prepares_commands
        kept = runtime.prepare_command(running.name, ["sh", "-c", "echo kept > kept.txt"], user="root")
        dropped = runtime.prepare_command(running.name, ["sh", "-c", "echo dropped > dropped.txt"], user="root")
        assert kept is not None and dropped is not None
        assert not (workspace / "kept.txt").exists()
        dropped.end()
        assert kept.run() == 0
        assert (workspace / "kept.txt").read_text() == "kept\n"
        assert not (workspace / "dropped.txt").exists()
        failing = runtime.prepare_command(running.name, ["sh", "-c", "exit 6"])
        assert failing is not None and failing.run() == 6
        runtime.stop_sandbox(running.name, timeout_s=5)
        assert runtime.prepare_command(running.name, ["true"]) is None
        assert runtime.prepare_command("opencode-sandbox-vm-no-such-project-1", ["true"]) is None

    @pytest.mark.needs_boot
    def test_exec_missing_command_fails_without_raising(
        self, runtime: Runtime, running: SandboxInfo
    ) -> None:
        result = runtime.exec(running.name, ["cat", "/no/such/file"])
        assert result.exit_code != 0
        assert "No such file" in result.stderr

    @pytest.mark.needs_boot
    def test_host_port_only_on_loopback(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        spec = self.spec(new_slug(), contract_image, workspace, ports=(GUEST_PORT,))
        created.sandbox(spec)
        port = runtime.host_port(spec.name, GUEST_PORT)
        assert 0 < port < 65536
        assert _connects("127.0.0.1", port)
        address = _local_address()
        if address is not None:
            assert not _connects(address, port)
        with pytest.raises(NotFound):
            runtime.host_port(spec.name, GUEST_PORT + 1)

    @pytest.mark.needs_boot
    def test_a_chosen_host_port_and_the_port_map(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        chosen = _free_port()
        spec = self.spec(new_slug(), contract_image, workspace, ports=(GUEST_PORT, GUEST_PORT + 1))._replace(
            host_ports={GUEST_PORT + 1: chosen})
        created.sandbox(spec)
        ports = runtime.port_map(spec.name)
        assert ports[GUEST_PORT + 1] == chosen
        assert ports == {GUEST_PORT: runtime.host_port(spec.name, GUEST_PORT), GUEST_PORT + 1: chosen}
        assert _connects("127.0.0.1", chosen)
        info = runtime.get_sandbox(spec.name)
        assert info is not None and info.ports in (None, ports), "the ports read with the VM are its ports"
        runtime.stop_sandbox(spec.name)
        assert runtime.port_map(spec.name) == {}
        info = runtime.get_sandbox(spec.name)
        assert info is not None and not info.ports, "a stopped VM reports no ports"

    # --- volumes -------------------------------------------------------------------------

    def test_volume_create_get_list_remove(self, runtime: Runtime, created: Created) -> None:
        slug = new_slug()
        name = created.volume(slug)
        info = runtime.get_volume(name)
        assert info is not None
        assert info.name == name
        assert info.labels[LABEL_MANAGED] == "true"
        assert info.labels[LABEL_SLUG] == slug
        assert info.created_at is not None and info.created_at.tzinfo is not None
        assert name in {volume.name for volume in runtime.list_volumes()}

        runtime.remove_volume(name)
        assert runtime.get_volume(name) is None
        assert name not in {volume.name for volume in runtime.list_volumes()}
        with pytest.raises(NotFound):
            runtime.remove_volume(name)

    def test_duplicate_volume_is_refused(self, runtime: Runtime, created: Created) -> None:
        name = created.volume(new_slug())
        with pytest.raises(SandboxError) as raised:
            runtime.create_volume(name, managed_labels("other"))
        assert not isinstance(raised.value, NotOurs)
        kept = runtime.get_volume(name)
        assert kept is not None and kept.labels[LABEL_MANAGED] == "true"

    def test_missing_volume(self, runtime: Runtime) -> None:
        name = home_volume_name(new_slug())
        assert runtime.get_volume(name) is None
        with pytest.raises(NotFound):
            runtime.remove_volume(name)
        with pytest.raises(NotFound):
            runtime.copy_volume(name, name)

    def _check_image_home(
        self, runtime: Runtime, name: str, greeting: str = "hello from the image\n"
    ) -> None:
        def run(*argv: str) -> str:
            result = runtime.exec(name, list(argv))
            assert result.exit_code == 0, result.stderr
            return result.stdout

        assert run("cat", "/home/dev/.config/greeting") == greeting
        assert run("stat", "-c", "%U %a", "/home/dev/.config/greeting") == "dev 600\n"
        assert run("stat", "-c", "%U %a", "/home/dev/.config") == "dev 700\n"
        assert run("stat", "-c", "%U %a", "/home/dev/system.txt") == "root 644\n"
        assert run("readlink", "/home/dev/greeting.link") == ".config/greeting\n"
        assert run("cat", "/home/dev/greeting.link") == greeting

    @pytest.mark.needs_boot
    def test_fill_volume_from_image_keeps_owners_modes_links(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        home = created.volume(slug)
        runtime.fill_volume_from_image(home, contract_image, "/home/dev")
        info = created.sandbox(self.spec(slug, contract_image, workspace, home=home))
        self._check_image_home(runtime, info.name)

    def test_fill_volume_needs_existing_volume_and_image(
        self, runtime: Runtime, contract_image: str, created: Created
    ) -> None:
        slug = new_slug()
        with pytest.raises(NotFound):
            runtime.fill_volume_from_image(home_volume_name(slug), contract_image)
        home = created.volume(slug)
        with pytest.raises(NotFound):
            runtime.fill_volume_from_image(home, f"{IMAGE_REPOSITORY_PREFIX}{slug}:missing")

    @pytest.mark.needs_boot
    def test_copy_volume_on_top_keeps_owners_modes_links(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        source = created.volume(slug, minute=1)
        target = created.volume(slug, minute=2)
        runtime.fill_volume_from_image(source, contract_image, "/home/dev")
        runtime.fill_volume_from_image(target, contract_image, "/home/dev")

        writer = created.sandbox(self.spec(slug, contract_image, workspace, home=source))
        write = runtime.exec(
            writer.name,
            [
                "sh",
                "-c",
                "echo notes > /home/dev/notes.txt && chmod 640 /home/dev/notes.txt"
                " && echo changed > /home/dev/.config/greeting",
            ],
        )
        assert write.exit_code == 0, write.stderr
        runtime.remove_sandbox(writer.name)

        target_writer = created.sandbox(self.spec(slug, contract_image, workspace, home=target))
        own = runtime.exec(target_writer.name, ["sh", "-c", "echo mine > /home/dev/own.txt"])
        assert own.exit_code == 0, own.stderr
        runtime.remove_sandbox(target_writer.name)

        runtime.copy_volume(source, target)
        reader = created.sandbox(self.spec(slug, contract_image, workspace, home=target))
        self._check_image_home(runtime, reader.name, greeting="changed\n")
        notes = runtime.exec(reader.name, ["stat", "-c", "%U %a", "/home/dev/notes.txt"])
        assert notes.stdout == "dev 640\n"
        assert runtime.exec(reader.name, ["cat", "/home/dev/own.txt"]).stdout == "mine\n"
        assert runtime.get_volume(source) is not None

    @pytest.mark.needs_boot
    def test_home_survives_stop_start_and_sandbox_removal(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        home = created.volume(slug)
        runtime.fill_volume_from_image(home, contract_image, "/home/dev")
        spec = self.spec(slug, contract_image, workspace, home=home)
        created.sandbox(spec)
        wrote = runtime.exec(spec.name, ["sh", "-c", "echo kept > /home/dev/state.txt"])
        assert wrote.exit_code == 0, wrote.stderr

        runtime.stop_sandbox(spec.name)
        runtime.start_sandbox(spec.name)
        assert runtime.exec(spec.name, ["cat", "/home/dev/state.txt"]).stdout == "kept\n"

        runtime.remove_sandbox(spec.name)
        assert runtime.get_volume(home) is not None
        created.sandbox(spec)
        assert runtime.exec(spec.name, ["cat", "/home/dev/state.txt"]).stdout == "kept\n"

    @pytest.mark.needs_boot
    def test_volume_used_by_a_sandbox_is_not_removed(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        home = created.volume(slug)
        spec = self.spec(slug, contract_image, workspace, home=home)
        created.sandbox(spec)
        runtime.stop_sandbox(spec.name)
        with pytest.raises(SandboxError):
            runtime.remove_volume(home)
        assert runtime.get_volume(home) is not None

    # --- foreign look-alikes -------------------------------------------------------------

    def test_foreign_sandbox_is_never_listed_nor_touched(
        self,
        runtime: Runtime,
        contract_image: str,
        foreign: ForeignArtifacts,
        created: Created,
        workspace: Path,
    ) -> None:
        slug = new_slug()
        name = vm_name(slug)
        foreign.sandbox(name)
        assert name not in {sandbox.name for sandbox in runtime.list_sandboxes()}
        assert runtime.sandbox_images()[name] == contract_image  # what it runs on counts as in use
        with pytest.raises(NotOurs):
            runtime.get_sandbox(name)
        with pytest.raises(NotOurs):
            runtime.remove_sandbox(name)
        with pytest.raises(NotOurs):
            runtime.stop_sandbox(name)
        with pytest.raises(NotOurs):
            created.sandbox(self.spec(slug, contract_image, workspace))
        assert foreign.sandbox_exists(name)

    def test_foreign_volumes_are_never_listed_nor_removed(
        self, runtime: Runtime, foreign: ForeignArtifacts
    ) -> None:
        token = uuid.uuid4().hex[:8]
        unlabelled = home_volume_name(new_slug())
        without_slug = f"{HOME_PREFIX.rstrip('-')}-{token}"
        foreign.volume(unlabelled, {})
        foreign.volume(without_slug, {LABEL_MANAGED: "true"})
        listed = {volume.name for volume in runtime.list_volumes()}
        for name in (unlabelled, without_slug):
            assert name not in listed
            with pytest.raises(NotOurs):
                runtime.remove_volume(name)
            assert foreign.volume_exists(name)
        with pytest.raises(NotOurs):
            runtime.create_volume(unlabelled, managed_labels("x"))

    # --- images --------------------------------------------------------------------------

    def test_images_load_list_remove(self, runtime: Runtime, spare_image: str, spare_image_id: str) -> None:
        before = runtime.loaded_image(spare_image)
        info = runtime.load_image(spare_image)
        assert info.reference == spare_image
        assert info.digest == spare_image_id, "a loaded image's digest is its ID in the Docker engine"
        assert before is None or before.digest == info.digest
        present = runtime.loaded_image(spare_image)
        assert present is not None and present.digest == info.digest
        again = runtime.load_image(spare_image)
        assert again.digest == info.digest

        listed = {image.reference: image for image in runtime.list_images()}
        assert listed[spare_image].digest == info.digest
        assert all(ref.startswith(IMAGE_REPOSITORY_PREFIX) for ref in listed)

        runtime.remove_image(spare_image)
        assert spare_image not in {image.reference for image in runtime.list_images()}

    def test_missing_and_foreign_images(self, runtime: Runtime) -> None:
        missing = f"{IMAGE_REPOSITORY_PREFIX}{new_slug()}:missing"
        with pytest.raises(NotFound):
            runtime.load_image(missing)
        with pytest.raises(NotFound):
            runtime.loaded_image(missing)
        with pytest.raises(NotFound):
            runtime.remove_image(missing)
        with pytest.raises(NotOurs):
            runtime.remove_image("debian:trixie-slim")
