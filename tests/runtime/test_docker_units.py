"""Pure parts of the docker backend: statuses, timestamps, ports and argument lists."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import BootFailed, UsageError
from opencode_sandbox.runtime.docker.args import run_args, sandbox_labels, sized_from_the_start
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.docker.netfilter import policy_label, policy_of_label
from opencode_sandbox.runtime.docker.parse import (
    container_status,
    parse_time,
    published_host_port,
    published_port_map,
    sandbox_info,
)
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec, SandboxStatus


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"Status": "running"}, SandboxStatus.RUNNING),
        ({"Status": "created"}, SandboxStatus.CREATED),
        ({"Status": "restarting"}, SandboxStatus.STARTING),
        ({"Status": "paused"}, SandboxStatus.PAUSED),
        ({"Status": "removing"}, SandboxStatus.DRAINING),
        ({"Status": "dead"}, SandboxStatus.CRASHED),
        ({"Status": "exited", "ExitCode": 0}, SandboxStatus.STOPPED),
        ({"Status": "exited", "ExitCode": 143}, SandboxStatus.STOPPED),
        ({"Status": "exited", "ExitCode": 137}, SandboxStatus.STOPPED),
        ({"Status": "exited", "ExitCode": 137, "OOMKilled": True}, SandboxStatus.CRASHED),
        ({"Status": "exited", "ExitCode": 139}, SandboxStatus.CRASHED),
        ({"Status": "exited", "ExitCode": 0, "Error": "mount failed"}, SandboxStatus.CRASHED),
        ({"Status": "weird"}, SandboxStatus.UNKNOWN),
    ],
)
def test_container_status(state: dict[str, object], expected: SandboxStatus) -> None:
    assert container_status(state) is expected


def test_parse_time_nanoseconds_zones_and_zero() -> None:
    assert parse_time("2026-01-02T03:04:05.123456789Z") == datetime(
        2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC
    )
    assert parse_time("2026-01-02T05:04:05+02:00") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time("") is None
    assert parse_time(None) is None


def test_last_activity_is_the_latest_moment() -> None:
    info = sandbox_info(
        {
            "Name": "/opencode-sandbox-vm-a-0123456789abcd",
            "Created": "2026-01-01T00:00:00Z",
            "State": {
                "Status": "exited",
                "ExitCode": 0,
                "StartedAt": "2026-01-02T00:00:00Z",
                "FinishedAt": "2026-01-03T00:00:00Z",
            },
            "Config": {"Image": "img:1", "Labels": {"a": "b"}},
        }
    )
    assert info.name == "opencode-sandbox-vm-a-0123456789abcd"
    assert info.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert info.last_activity_at == datetime(2026, 1, 3, tzinfo=UTC)
    assert info.labels == {"a": "b"}


def test_only_loopback_bindings_count() -> None:
    document = {
        "NetworkSettings": {
            "Ports": {
                "4096/tcp": [{"HostIp": "0.0.0.0", "HostPort": "1111"}],
                "5000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "2222"}],
                "6000/tcp": None,
            }
        }
    }
    assert published_host_port(document, 4096) is None
    assert published_host_port(document, 5000) == 2222
    assert published_host_port(document, 6000) is None
    assert published_port_map(document) == {5000: 2222}


def test_run_args() -> None:
    spec = SandboxSpec(
        name="opencode-sandbox-vm-a-0123456789abcd",
        image="img:1",
        cpus=2,
        memory_mib=4096,
        env={"K": "v w"},
        mounts=(
            Mount(MountKind.VOLUME, "home", "/home/dev"),
            Mount(MountKind.BIND, "/src", "/workspace", readonly=True),
        ),
        published_ports=(4096,),
    )
    labels = sandbox_labels({"x": "y"}, "a-0123456789abcd")
    args = run_args(spec, labels, privileged=True)
    joined = " ".join(args)
    assert args[:2] == ["run", "--detach"]
    assert "--init" in args and "--privileged" in args
    assert "--entrypoint sleep" in joined and args[-2:] == ["img:1", "infinity"]
    assert "--cpus 2" in joined and "--memory 4096m" in joined
    assert "--publish 127.0.0.1::4096/tcp" in joined
    assert "type=volume,source=home,target=/home/dev,volume-nocopy" in args
    assert "type=bind,source=/src,target=/workspace,readonly" in args
    assert args[args.index("-e") : args.index("-e") + 2] == ["-e", "K"]  # its value travels in the environment
    assert "org.opencode-sandbox.managed=true" in args
    assert "org.opencode-sandbox.slug=a-0123456789abcd" in args
    assert "--cap-drop" not in args, "a privileged VM keeps what --privileged gives"
    confined = run_args(spec._replace(pids_limit=512), labels, privileged=False, seccomp="/p.json")
    assert "--privileged" not in confined
    confinement = "--cap-drop ALL --security-opt no-new-privileges --security-opt seccomp=/p.json"
    assert " ".join(confined).count(confinement) == 1
    assert confined[confined.index("--pids-limit") + 1] == "512"
    assert "--pids-limit" not in args


def test_a_chosen_host_port_and_a_read_only_file_mount() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-a-0123456789abcd", image="img:1", cpus=1, memory_mib=512,
                       mounts=(Mount(MountKind.BIND, "/home/u/.gitconfig", "/mnt/gitconfig", readonly=True),
                               Mount(MountKind.BIND, "/srv/out", "/mnt/out")),
                       published_ports=(4096, 3000), host_ports={3000: 8080})
    args = run_args(spec, sandbox_labels({}, "a-0123456789abcd"), privileged=False, seccomp="/p.json")
    assert [args[index + 1] for index, arg in enumerate(args) if arg == "--publish"] == [
        "127.0.0.1::4096/tcp", "127.0.0.1:8080:3000/tcp"]
    assert "type=bind,source=/home/u/.gitconfig,target=/mnt/gitconfig,readonly" in args
    assert "type=bind,source=/srv/out,target=/mnt/out" in args


def test_a_vm_on_its_own_network_keeps_no_capability() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-a-0123456789abcd", image="img:1", cpus=1, memory_mib=512)
    labels = sandbox_labels({}, "a-0123456789abcd")
    args = run_args(spec, labels, privileged=False, network="opencode-sandbox-net-a-0123456789abcd",
                    seccomp="/p.json")
    joined = " ".join(args)
    assert "--network opencode-sandbox-net-a-0123456789abcd" in joined
    assert "--cap-drop ALL" in joined, "NET_RAW included: a raw socket would go around the policy's rules"
    assert "--network" not in run_args(spec, labels, privileged=False, seccomp="/p.json")


def test_the_policy_label_gives_the_same_policy_back() -> None:
    policy = EgressPolicy(Profile.NONE, (parse_rule("10.1.0.0/16"),), (parse_rule("[fd00::/8]:443"),))
    label = policy_label(policy)
    assert policy_of_label(label) == EgressPolicy(Profile.NONE, (parse_rule("10.1.0.0/16"),),
                                                  (parse_rule("[fd00::/8]:443"),))
    assert policy_of_label(None) is None and policy_of_label("") is None


def test_docker_refuses_what_it_cannot_enforce_before_creating_anything() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-a-0123456789abcd", image="img:1", cpus=1, memory_mib=512,
                       network=EgressPolicy(Profile.ALLOWLIST), privileged=True)
    runtime = _runtime_of_a_dind_image()
    with pytest.raises(UsageError) as refused:
        runtime.create_sandbox(spec)
    assert "Docker-in-Docker" in refused.value.message
    assert "microsandbox" in (refused.value.hint or "")


def _runtime_of_a_dind_image() -> DockerRuntime:
    class NoEngine(DockerCli):
        def run_raw(self, args: Sequence[str], **_: object) -> subprocess.CompletedProcess[bytes]:
            raise AssertionError(f"docker {' '.join(args)} must not run")

    runtime = DockerRuntime(NoEngine())
    runtime.images.inspect_image = (  # type: ignore[method-assign]
        lambda reference: {"Config": {"Labels": {"org.opencode-sandbox.dind": "true"}}})
    return runtime


def test_an_images_label_alone_never_makes_a_privileged_vm() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-a-0123456789abcd", image="img:1", cpus=1, memory_mib=512,
                       network=EgressPolicy(Profile.ALL))
    with pytest.raises(BootFailed) as refused:
        _runtime_of_a_dind_image().create_sandbox(spec)
    assert "privileged" in refused.value.message
    assert "dind: true" in (refused.value.hint or "") and "host root" in (refused.value.hint or "")


def test_a_program_on_a_terminal_takes_its_size_first_and_its_arguments_unchanged() -> None:
    sized = sized_from_the_start(["printf", "%s|", "two words", "it's"], (120, 40))
    assert sized[4:6] == ["120", "40"]
    ran = subprocess.run(sized, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    assert ran.stdout == "two words|it's|"  # no terminal here: stty's complaint is dropped
    assert ran.stderr == ""


@pytest.mark.parametrize("size", [None, (0, 0), (80, 0)])
def test_without_a_size_to_give_the_program_runs_as_given(size: tuple[int, int] | None) -> None:
    assert sized_from_the_start(["tmux", "attach"], size) == ["tmux", "attach"]
