"""Docker-only behaviour: engine failures, dind, crashes, attach, call cost and a full cycle."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import termios
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import LABEL_SLUG, home_volume_name, managed_labels, vm_name
from opencode_sandbox.engine import socket_client as docker_api
from opencode_sandbox.engine.command import MANAGEMENT_TIMEOUT_S, DockerCli
from opencode_sandbox.errors import BootFailed, NotFound, RuntimeUnavailable, SandboxError
from opencode_sandbox.runtime.docker import seccomp
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec, SandboxStatus
from tests.runtime.conftest import build_image, docker

pytestmark = pytest.mark.docker


class CountingCli(DockerCli):
    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []
        self.argument_lists: list[list[str]] = []

    def run_raw(  # type: ignore[override]
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = MANAGEMENT_TIMEOUT_S,
        environment: Mapping[str, str] | None = None,
    ):
        self.commands.append(args[0])
        self.argument_lists.append(list(args))
        return super().run_raw(args, stdin=stdin, timeout_s=timeout_s, environment=environment)


@pytest.fixture
def slug() -> Iterator[str]:
    value = "docker-" + uuid.uuid4().hex[:14]
    yield value
    docker("rm", "--force", vm_name(value))
    for minute in range(3):
        docker("volume", "rm", "--force", home_volume_name_at(value, minute))


def home_volume_name_at(slug: str, minute: int) -> str:
    from datetime import UTC, datetime

    return home_volume_name(slug, datetime(2030, 1, 1, 0, minute, tzinfo=UTC))


def make_spec(slug: str, image: str, workspace: Path, home: str | None = None) -> SandboxSpec:
    mounts = [Mount(MountKind.BIND, str(workspace), "/workspace")]
    if home:
        mounts.append(Mount(MountKind.VOLUME, home, "/home/dev"))
    return SandboxSpec(
        name=vm_name(slug),
        image=image,
        cpus=1,
        memory_mib=256,
        labels=managed_labels(slug),
        mounts=tuple(mounts),
    )


def inspect(name: str) -> dict[str, object]:
    found = docker("inspect", "--type", "container", name)
    assert found.returncode == 0, found.stderr
    document: dict[str, object] = json.loads(found.stdout)[0]
    return document


def test_engine_not_answering(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/missing.sock")
    runtime = DockerRuntime()
    for call in (runtime.check_available, runtime.list_sandboxes, runtime.list_volumes):
        with pytest.raises(RuntimeUnavailable) as raised:
            call()
        assert raised.value.hint and "doctor" in raised.value.hint
    with pytest.raises(RuntimeUnavailable):
        runtime.get_sandbox(vm_name("x-0123456789abcd"))
    with pytest.raises(RuntimeUnavailable):
        runtime.exec(vm_name("x-0123456789abcd"), ["true"])


def test_docker_not_installed() -> None:
    runtime = DockerRuntime(DockerCli("docker-" + uuid.uuid4().hex))
    with pytest.raises(RuntimeUnavailable, match="not installed"):
        runtime.check_available()


def test_dind_image_runs_privileged_and_plain_does_not(
    docker_contract_image: str, slug: str, tmp_path: Path
) -> None:
    dind = f"opencode-sandbox-test/dind-{uuid.uuid4().hex[:10]}:latest"
    folder = tmp_path / "dind"
    folder.mkdir()
    build_image(
        dind,
        f'FROM {docker_contract_image}\nLABEL org.opencode-sandbox.dind="true"\n',
        folder,
    )
    cli = CountingCli()
    runtime = DockerRuntime(cli)
    try:
        with pytest.raises(BootFailed) as refused:  # the image's label alone, without the user's `dind: true`
            runtime.create_sandbox(make_spec(slug, dind, tmp_path))
        assert "asks for a privileged VM" in refused.value.message
        assert not any(args[0] == "run" for args in cli.argument_lists)
        try:
            runtime.create_sandbox(make_spec(slug, dind, tmp_path)._replace(privileged=True))
        except BootFailed as failure:
            # Hosts that are themselves unprivileged containers refuse --privileged.
            assert "not permitted" in failure.message
            assert runtime.get_sandbox(vm_name(slug)) is None
        else:
            host_config = inspect(vm_name(slug))["HostConfig"]
            assert isinstance(host_config, dict) and host_config["Privileged"] is True
            assert not any(option.startswith("seccomp=") for option in host_config["SecurityOpt"] or [])
            runtime.remove_sandbox(vm_name(slug))
        run = next(args for args in cli.argument_lists if args[0] == "run")
        assert "--privileged" in run
        runtime.create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
        host_config = inspect(vm_name(slug))["HostConfig"]
        assert isinstance(host_config, dict) and host_config["Privileged"] is False
        assert host_config["CapDrop"] == ["ALL"] and host_config["SecurityOpt"][0] == "no-new-privileges"
        assert json.loads(host_config["SecurityOpt"][1].removeprefix("seccomp=")) == seccomp.profile()
    finally:
        docker("rm", "--force", vm_name(slug))
        docker("image", "rm", "--force", dind)


def test_main_process_dying_is_a_crash_and_exec_then_refuses(
    docker_contract_image: str, slug: str, tmp_path: Path
) -> None:
    runtime = DockerRuntime()
    name = vm_name(slug)
    runtime.create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
    killed = runtime.exec(
        name, ["sh", "-c", "kill -SEGV $(cat /proc/1/task/1/children)"], user="root"
    )
    assert killed.exit_code in (0, 137, 139), killed.stderr
    assert docker("wait", name).stdout.decode().strip() == "139"
    info = runtime.get_sandbox(name)
    assert info is not None and info.status is SandboxStatus.CRASHED
    with pytest.raises(SandboxError, match="not running"):
        runtime.exec(name, ["true"])
    with pytest.raises(NotFound):
        runtime.exec(vm_name("gone-0123456789abcd"), ["true"])


def test_warm_path_starts_no_process(docker_contract_image: str, slug: str, tmp_path: Path) -> None:
    DockerRuntime().create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
    cli = CountingCli()
    runtime = DockerRuntime(cli)
    info = runtime.get_sandbox(vm_name(slug))
    assert info is not None and info.status is SandboxStatus.RUNNING
    assert runtime.exec(vm_name(slug), ["true"]).exit_code == 0
    assert runtime.exec(vm_name(slug), ["false"]).exit_code == 1
    # The inspection and the execs go over the engine's socket: no `docker` process at all.
    assert cli.commands == []


def test_socket_inspection_matches_the_command(
    docker_contract_image: str, slug: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    DockerRuntime().create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
    through_socket = DockerRuntime().get_sandbox(vm_name(slug))
    monkeypatch.setattr(docker_api, "local_socket", lambda environ=None: None)
    cli = CountingCli()
    through_command = DockerRuntime(cli).get_sandbox(vm_name(slug))
    assert cli.commands == ["inspect"]
    assert through_socket == through_command
    assert through_socket is not None and through_socket.labels[LABEL_SLUG] == slug


def test_attach_returns_the_exit_code(
    docker_contract_image: str, slug: str, tmp_path: Path
) -> None:
    runtime = DockerRuntime()
    runtime.create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
    code = runtime.attach(vm_name(slug), ["sh", "-c", "exit 5"], tty=False)
    assert code == 5


def test_an_attached_program_finds_the_users_terminal_size_from_its_start(
    docker_contract_image: str, slug: str, tmp_path: Path
) -> None:
    """Read at once, the size is the user's terminal's: tmux, attaching as it starts, must not see
    the engine's terminal before `docker exec` sized it."""
    runtime = DockerRuntime()
    runtime.create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
    attach = ("import sys; from opencode_sandbox.runtime.docker.backend import DockerRuntime; "
              "sys.exit(DockerRuntime().attach(sys.argv[1], ['stty', 'size'], user='root', workdir='/'))")
    screen = run_on_a_terminal([sys.executable, "-c", attach, vm_name(slug)], columns=187, lines=43)
    assert screen.split()[:2] == ["43", "187"], screen  # then the modes the relay resets


def run_on_a_terminal(argv: list[str], columns: int, lines: int) -> str:
    """What `argv` prints, run on a pseudo-terminal of the size given as its controlling terminal."""
    master, terminal = os.openpty()
    termios.tcsetwinsize(terminal, (lines, columns))
    try:
        process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
                                   preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    finally:
        os.close(terminal)
    printed = bytearray()
    with contextlib.suppress(OSError):  # EIO: the terminal's last holder closed it
        while piece := os.read(master, 4096):
            printed += piece
    os.close(master)
    assert process.wait(timeout=60) == 0, printed
    return printed.decode(errors="replace")


def test_exec_timeout_raises(docker_contract_image: str, slug: str, tmp_path: Path) -> None:
    runtime = DockerRuntime()
    runtime.create_sandbox(make_spec(slug, docker_contract_image, tmp_path))
    with pytest.raises(SandboxError, match="did not finish"):
        runtime.exec(vm_name(slug), ["sleep", "30"], timeout_s=1)


def test_end_to_end_cycle_keeps_the_home_volume(
    docker_contract_image: str, slug: str, tmp_path: Path
) -> None:
    runtime = DockerRuntime(helper_image=docker_contract_image)
    home = home_volume_name_at(slug, 0)
    spare = home_volume_name_at(slug, 1)
    runtime.create_volume(home, managed_labels(slug))
    runtime.fill_volume_from_image(home, docker_contract_image)
    spec = make_spec(slug, docker_contract_image, tmp_path, home=home)

    runtime.create_sandbox(spec)
    greeting = runtime.exec(spec.name, ["cat", "/home/dev/.config/greeting"])
    assert greeting.stdout == "hello from the image\n"
    wrote = runtime.exec(spec.name, ["sh", "-c", "cat > /home/dev/diary"], stdin=b"day one\n")
    assert wrote.exit_code == 0, wrote.stderr

    runtime.stop_sandbox(spec.name)
    stopped = runtime.get_sandbox(spec.name)
    assert stopped is not None and stopped.status is SandboxStatus.STOPPED
    runtime.start_sandbox(spec.name)
    assert runtime.exec(spec.name, ["cat", "/home/dev/diary"]).stdout == "day one\n"

    runtime.remove_sandbox(spec.name)
    assert runtime.get_sandbox(spec.name) is None
    assert home in {volume.name for volume in runtime.list_volumes()}

    runtime.create_volume(spare, managed_labels(slug))
    runtime.copy_volume(home, spare)
    copied = docker(
        "run", "--rm", "--mount", f"type=volume,source={spare},target=/v",
        docker_contract_image, "stat", "-c", "%U %a %s", "/v/diary",
    )
    assert copied.stdout.decode() == "dev 644 8\n"
    runtime.remove_volume(spare)
    runtime.remove_volume(home)
    assert runtime.get_volume(home) is None
