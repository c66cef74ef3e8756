"""The microsandbox backend's pure parts: output parsing, the KVM probe, finding msb."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.core.naming import is_ours as sandbox_is_ours
from opencode_sandbox.runtime.microsandbox import parse as msb_parse
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime, image_is_ours
from opencode_sandbox.runtime.microsandbox.cli import MsbCli
from opencode_sandbox.runtime.microsandbox.kvm import KVM_DEVICE, probe_kvm
from opencode_sandbox.runtime.microsandbox.network import msb_network_args
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec, SandboxStatus

INSPECTED = {
    "name": "opencode-sandbox-vm-demo-0123456789abcd",
    "status": "Stopped",
    "created_at": "2026-11-29T10:47:21.239101049+00:00",
    "updated_at": "2026-11-29T10:47:37.5+00:00",
    "active_config": None,
    "config": {
        "image": {"Oci": {"reference": "opencode-sandbox/runner-demo:abc", "root_disk": {}}},
        "labels": {"org.opencode-sandbox.managed": "true", "flag": None},
        "mounts": [
            {"type": "Bind", "host": "/src", "guest": "/workspace"},
            {"type": "Named", "name": "home-vol", "guest": "/home/dev"},
        ],
        "network": {
            "ports": [
                {"guest_port": 4096, "host_bind": "127.0.0.1", "host_port": 40123, "protocol": "tcp"},
                {"guest_port": 53, "host_bind": "127.0.0.1", "host_port": 40124, "protocol": "udp"},
            ]
        },
    },
}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Stopped", SandboxStatus.STOPPED),
        ("running", SandboxStatus.RUNNING),
        ("Crashed", SandboxStatus.CRASHED),
        ("Draining", SandboxStatus.DRAINING),
        ("Hibernating", SandboxStatus.UNKNOWN),
        (None, SandboxStatus.UNKNOWN),
    ],
)
def test_statuses_map_onto_the_interface_enum(raw: object, expected: SandboxStatus) -> None:
    assert msb_parse.parse_status(raw) is expected


def test_nanosecond_timestamps_become_aware_datetimes() -> None:
    moment = msb_parse.parse_time("2026-11-29T10:47:21.239101049+00:00")
    assert moment == datetime(2026, 11, 29, 10, 47, 21, 239101, tzinfo=UTC)
    assert msb_parse.parse_time("2026-11-29T10:47:21Z") == datetime(2026, 11, 29, 10, 47, 21, tzinfo=UTC)


def test_millisecond_timestamps_become_aware_datetimes() -> None:
    moment = msb_parse.parse_time(1795949239518.0)
    assert moment is not None and moment.tzinfo is not None
    assert moment.timestamp() == pytest.approx(1795949239.518)
    assert msb_parse.parse_time(None) is None
    assert msb_parse.parse_time("not a time") is None


def test_inspect_output_becomes_sandbox_info() -> None:
    info = msb_parse.sandbox_info(INSPECTED)
    assert info.name == "opencode-sandbox-vm-demo-0123456789abcd"
    assert info.status is SandboxStatus.STOPPED
    assert info.image == "opencode-sandbox/runner-demo:abc"
    assert info.labels == {"org.opencode-sandbox.managed": "true", "flag": ""}
    assert info.created_at is not None and info.last_activity_at is not None
    assert info.last_activity_at > info.created_at


def test_published_ports_and_named_volumes_are_read_from_the_config() -> None:
    assert msb_parse.published_port_map(INSPECTED) == {4096: 40123}
    assert msb_parse.published_host_port(INSPECTED, 4096) == 40123
    assert msb_parse.published_host_port(INSPECTED, 53) is None
    assert msb_parse.published_host_port(INSPECTED, 22) is None
    assert msb_parse.named_volumes_of(INSPECTED) == {"home-vol"}


def test_running_config_wins_over_the_stored_one() -> None:
    running = dict(INSPECTED)
    running["active_config"] = {"network": {"ports": [{"guest_port": 4096, "host_port": 50000, "protocol": "tcp"}]}}
    assert msb_parse.published_host_port(running, 4096) == 50000


def test_volume_inspect_text_is_parsed() -> None:
    text = (
        "Name:                 v1\nKind:                 dir\nQuota:                unlimited\n"
        "Path:                 /tmp/x/volumes/v1\nCreated:              2026-11-29 10:47:19\n"
        "Labels:               a=b, org.opencode-sandbox.managed=true\n"
    )
    fields = msb_parse.volume_inspect_fields(text)
    assert fields["path"] == "/tmp/x/volumes/v1"
    assert fields["kind"] == "dir"
    assert msb_parse.parse_label_list(fields["labels"]) == {
        "a": "b",
        "org.opencode-sandbox.managed": "true",
    }
    assert msb_parse.parse_label_list("-") == {}


def test_volume_size_is_capacity_or_quota() -> None:
    disk = msb_parse.volume_info("d", {"kind": "disk", "capacity": "512.0 MiB", "labels": "-"})
    folder = msb_parse.volume_info("f", {"kind": "dir", "quota": "2.0 MiB", "labels": "k=v"})
    unlimited = msb_parse.volume_info("u", {"kind": "dir", "quota": "unlimited"})
    assert (disk.size_bytes, folder.size_bytes, unlimited.size_bytes) == (512 << 20, 2 << 20, None)
    assert (disk.kind, folder.labels, unlimited.labels) == ("disk", {"k": "v"}, {})
    assert msb_parse.parse_size("1.5 GiB") == 3 << 29


def test_a_volume_s_creation_time_is_read_in_the_host_s_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patched:
        patched.setenv("TZ", "America/New_York")
        time.tzset()
        created = msb_parse.volume_info("v", {"created": "2026-12-04 09:43:11"}).created_at
    time.tzset()
    assert created == datetime(2026, 12, 4, 14, 43, 11, tzinfo=UTC)
    assert msb_parse.volume_info("v", {"created": "soon"}).created_at is None


def test_image_ownership_is_our_repository_prefix() -> None:
    assert image_is_ours("opencode-sandbox/runner-demo-0123456789abcd:h")
    assert image_is_ours("docker.io/opencode-sandbox/runner-base:latest")
    assert not image_is_ours("opencode-sandbox-runner-demo-0123456789abcd:h")
    assert not image_is_ours("someone/runner-demo:h")


def test_sandbox_ownership_needs_the_slug_label_of_its_name() -> None:
    name = "opencode-sandbox-vm-demo-0123456789abcd"
    ours = {"org.opencode-sandbox.managed": "true", "org.opencode-sandbox.slug": "demo-0123456789abcd"}
    assert sandbox_is_ours(name, ours)
    assert sandbox_is_ours("opencode-sandbox-task-demo-0123456789abcd-2", ours)
    # Labels inherited from one of our images, on a sandbox someone else created:
    assert not sandbox_is_ours(name, {"org.opencode-sandbox.managed": "true"})
    assert not sandbox_is_ours(name, {**ours, "org.opencode-sandbox.slug": "other-0123456789abcd"})
    assert not sandbox_is_ours("other-vm-demo-0123456789abcd", ours)


def test_a_missing_kvm_device_is_reported_with_a_fix(tmp_path: Path) -> None:
    check = probe_kvm(device=tmp_path / "kvm")
    assert not check.ok
    assert check.cause is not None and "does not exist" in check.cause
    assert check.fix is not None and "--runtime docker" in check.fix


@pytest.mark.skipif(
    not (KVM_DEVICE.exists() and os.access(KVM_DEVICE, os.R_OK | os.W_OK)),
    reason="needs a readable and writable /dev/kvm",
)
def test_the_cpu_virtualization_flag_decides_when_kvm_answers(tmp_path: Path) -> None:
    with_flag = tmp_path / "with"
    with_flag.write_text("processor\t: 0\nflags\t\t: fpu sse2 vmx hypervisor\n")
    without_flag = tmp_path / "without"
    without_flag.write_text("processor\t: 0\nflags\t\t: fpu sse2 hypervisor\n")
    assert probe_kvm(cpuinfo=with_flag).ok
    missing = probe_kvm(cpuinfo=without_flag)
    assert not missing.ok
    assert missing.cause is not None and "vmx or svm" in missing.cause


def test_msb_is_found_without_importing_the_sdk() -> None:
    script = (
        "import sys\n"
        "from opencode_sandbox.runtime.microsandbox.cli import locate_msb\n"
        "path = locate_msb()\n"
        "print(path)\n"
        "print('microsandbox' in sys.modules)\n"
    )
    found, imported = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert imported == "False"
    sdk_path = subprocess.run(
        [
            sys.executable,
            "-c",
            "from microsandbox._microsandbox import resolved_cli_msb_path as r; print(r())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found).resolve() == Path(sdk_path).resolve()
    assert os.access(found, os.X_OK)


def test_the_checkout_mirrors_its_modes_to_the_host_and_the_home_volume_stays_private(tmp_path: Path) -> None:
    spec = SandboxSpec(
        name="opencode-sandbox-vm-mounts-0123456789abcd", image="opencode-sandbox/runner-nothere:latest", cpus=1,
        memory_mib=512,
        mounts=(
            Mount(MountKind.BIND, str(tmp_path), "/workspace"),
            Mount(MountKind.VOLUME, "opencode-sandbox-home-x", "/home/dev"),
            Mount(MountKind.BIND, str(tmp_path), "/reference", readonly=True),
        ),
    )
    args = MicrosandboxRuntime()._create_args(spec)
    mounts = [(flag, value) for flag, value in itertools.pairwise(args) if flag.startswith("--mount")]
    assert mounts == [
        ("--mount-dir", f"{tmp_path}:/workspace:host-perms=mirror"),
        ("--mount-named", "opencode-sandbox-home-x:/home/dev"),
        ("--mount-dir", f"{tmp_path}:/reference:ro,host-perms=mirror"),
    ]


def test_a_host_file_is_mounted_as_a_file_and_a_chosen_host_port_is_kept(tmp_path: Path) -> None:
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n")
    spec = SandboxSpec(
        name="opencode-sandbox-vm-mounts-0123456789abcd", image="opencode-sandbox/runner-nothere:latest", cpus=1,
        memory_mib=512, mounts=(Mount(MountKind.BIND, str(gitconfig), "/mnt/gitconfig", readonly=True),
                                Mount(MountKind.BIND, str(tmp_path), "/mnt/out")),
        published_ports=(4096, 3000), host_ports={3000: 8080},
    )
    args = MicrosandboxRuntime()._create_args(spec)
    pairs = list(itertools.pairwise(args))
    assert ("--mount-file", f"{gitconfig}:/mnt/gitconfig:ro,host-perms=mirror") in pairs
    assert ("--mount-dir", f"{tmp_path}:/mnt/out:host-perms=mirror") in pairs
    ports = [value for flag, value in pairs if flag == "--port"]
    assert ports[1] == "127.0.0.1:8080:3000"
    assert ports[0].startswith("127.0.0.1:") and ports[0].endswith(":4096") and ports[0] != "127.0.0.1:8080:4096"


@pytest.mark.msb
def test_msb_takes_the_mount_options(tmp_path: Path) -> None:
    """msb reads the whole command line before it looks for the image: a misspelt mount option
    would be reported instead of the missing image."""
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n")
    spec = SandboxSpec(
        name="opencode-sandbox-vm-mounts-0123456789abcd", image="opencode-sandbox/runner-nothere:latest", cpus=1,
        memory_mib=512, mounts=(Mount(MountKind.BIND, str(tmp_path), "/workspace", readonly=True),
                                Mount(MountKind.BIND, str(gitconfig), "/mnt/gitconfig", readonly=True),
                                Mount(MountKind.BIND, str(tmp_path), "/mnt/out")),
        published_ports=(4096, 3000), host_ports={3000: 8080},
    )
    created = MsbCli().run(MicrosandboxRuntime()._create_args(spec))
    assert not created.ok
    assert "image not cached" in created.error_text, created.stderr


def test_the_network_policy_reaches_msb_create() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-net-0123456789abcd", image="opencode-sandbox/runner-nothere:latest",
                       cpus=1, memory_mib=512, network=EgressPolicy(Profile.NONE))
    args = MicrosandboxRuntime()._create_args(spec)
    assert args[-len(msb_network_args(EgressPolicy(Profile.NONE))):] == msb_network_args(EgressPolicy(Profile.NONE))
    without = MicrosandboxRuntime()._create_args(spec._replace(network=None))
    assert not any(arg.startswith("--net") for arg in without)


@pytest.mark.msb
def test_msb_takes_a_whole_create_line_with_secrets() -> None:
    """Secrets beside the environment, labels and the rest, their values in msb's environment as
    the backend gives them: msb reads it all and only then misses the image."""
    from opencode_sandbox.core.secrets import parse_secrets
    from opencode_sandbox.runtime.env_passing import child_environment

    secrets = parse_secrets({"OPENAI_API_KEY": ["api.openai.com"],
                             "ANTHROPIC_API_KEY": {"hosts": ["api.anthropic.com"], "headers": ["x-api-key"]}})
    spec = SandboxSpec(name="opencode-sandbox-vm-net-0123456789abcd", image="opencode-sandbox/runner-nothere:latest",
                       cpus=1, memory_mib=512, env={"LANG": "C.UTF-8", "OPENAI_API_KEY": "from-the-image"},
                       labels={"org.opencode-sandbox.managed": "true"}, published_ports=(4096,),
                       network=EgressPolicy(Profile.ALLOWLIST, secrets=secrets))
    values = {"OPENAI_API_KEY": "sk-test-value", "ANTHROPIC_API_KEY": "sk-ant-test-value"}
    args = MicrosandboxRuntime()._create_args(spec)
    assert "OPENAI_API_KEY" not in args  # never an --env: msb would copy the real value in
    created = MsbCli().run(args, environment=child_environment({"LANG": "C.UTF-8"}, secret_values=values))
    assert not created.ok
    assert "image not cached" in created.error_text, created.stderr


@pytest.mark.msb
@pytest.mark.parametrize("policy", [
    EgressPolicy(Profile.PUBLIC, (parse_rule("10.1.0.0/16"),), (parse_rule("*.example.com:443"),)),
    EgressPolicy(Profile.NONE), EgressPolicy(Profile.ALL),
    EgressPolicy(Profile.ALLOWLIST, (parse_rule("example.com"),)),
])
def test_msb_takes_the_network_arguments(policy: EgressPolicy) -> None:
    """msb reads the whole command line before it looks for the image: a rule it cannot read
    would be reported instead of the missing image."""
    spec = SandboxSpec(name="opencode-sandbox-vm-net-0123456789abcd", image="opencode-sandbox/runner-nothere:latest",
                       cpus=1, memory_mib=512, network=policy)
    created = MsbCli().run(MicrosandboxRuntime()._create_args(spec))
    assert not created.ok
    assert "image not cached" in created.error_text, created.stderr
