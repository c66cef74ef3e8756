"""Execs and starts over the engine's socket, on real containers of the runner base image."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.engine import socket_client as docker_api
from opencode_sandbox.engine.command import MANAGEMENT_TIMEOUT_S, DockerCli
from opencode_sandbox.errors import BootFailed, NotFound, SandboxError
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from tests.fixtures.listening import AcceptLoop
from tests.runtime.conftest import docker, docker_answers

pytestmark = pytest.mark.docker

IMAGE = "opencode-sandbox/runner-base:latest"
ATTACH = """
import json, sys
from opencode_sandbox.runtime.docker.backend import DockerRuntime
options = json.loads(sys.argv[1])
sys.exit(DockerRuntime().attach(options.pop("name"), options.pop("argv"), tty=False, **options))
"""


class NoCli(DockerCli):
    """A `docker` command that must not run: what it is asked fails the test."""

    def run_raw(  # type: ignore[override]
        self, args: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = MANAGEMENT_TIMEOUT_S,
        environment: Mapping[str, str] | None = None,
    ):
        raise AssertionError(f"the docker command ran: {list(args)}")

    def command(self, args: Sequence[str]) -> list[str]:
        raise AssertionError(f"the docker command ran: {list(args)}")


class CountingCli(DockerCli):
    """The `docker` command, recording the subcommand of every process it starts."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []

    def command(self, args: Sequence[str]) -> list[str]:
        self.commands.append(args[0])
        return super().command(args)


def spec_for(slug: str, workspace: Path) -> SandboxSpec:
    return SandboxSpec(
        name=vm_name(slug),
        image=IMAGE,
        cpus=1,
        memory_mib=256,
        labels=managed_labels(slug),
        mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),),
    )


def new_sandbox(workspace: Path) -> str:
    slug = "dexec-" + uuid.uuid4().hex[:14]
    workspace.mkdir(parents=True, exist_ok=True)
    DockerRuntime().create_sandbox(spec_for(slug, workspace))
    return vm_name(slug)


@pytest.fixture(scope="module")
def image() -> str:
    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    if docker("image", "inspect", IMAGE).returncode != 0:
        pytest.skip(f"{IMAGE} is not built here")
    return IMAGE


@pytest.fixture(scope="module")
def box(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One running sandbox shared by the tests that only run commands in it."""
    name = new_sandbox(tmp_path_factory.mktemp("workspace"))
    yield name
    docker("rm", "--force", name)


@pytest.fixture
def own_box(image: str, tmp_path: Path) -> Iterator[str]:
    """A sandbox of the test's own, for tests that stop or break it."""
    name = new_sandbox(tmp_path / "workspace")
    yield name
    docker("rm", "--force", name)


def attach_process(
    name: str,
    argv: Sequence[str],
    *,
    stdin: Any = subprocess.DEVNULL,
    child_env: Mapping[str, str] | None = None,
    prelude: str = "",
    **options: Any,
) -> subprocess.Popen[bytes]:
    """`DockerRuntime.attach(tty=False)` in a child whose fds 0, 1 and 2 are real.

    `options` go to `attach`; `child_env` to the child's environment, whose PATH has no `docker`
    unless `child_env` gives one.
    """
    document = json.dumps({"name": name, "argv": list(argv), **options})
    return subprocess.Popen(
        [sys.executable, "-c", prelude + ATTACH, document],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PATH": "/nonexistent", **(child_env or {})},
    )


def attach_run(
    name: str, argv: Sequence[str], *, input: bytes | None = None, **kwargs: Any
) -> tuple[int, bytes, bytes]:
    stdin = subprocess.PIPE if input is not None else kwargs.pop("stdin", subprocess.DEVNULL)
    process = attach_process(name, argv, stdin=stdin, **kwargs)
    stdout, stderr = process.communicate(input, timeout=120)
    return process.returncode, stdout, stderr


def cli_runtime(monkeypatch: pytest.MonkeyPatch) -> DockerRuntime:
    """A runtime that uses the `docker` command for everything."""
    monkeypatch.setattr(docker_api, "local_socket", lambda environ=None: None)
    return DockerRuntime()


def error_of(call: Any) -> SandboxError:
    with pytest.raises(SandboxError) as raised:
        call()
    return raised.value


def same_error(first: SandboxError, second: SandboxError) -> bool:
    return (type(first), first.message, first.hint) == (type(second), second.message, second.hint)


@pytest.mark.parametrize("code", [0, 3])
def test_exit_codes(box: str, code: int) -> None:
    argv = ["sh", "-c", f"exit {code}"]
    assert DockerRuntime(NoCli()).exec(box, argv).exit_code == code
    assert attach_run(box, argv)[0] == code


def test_missing_command(box: str, monkeypatch: pytest.MonkeyPatch) -> None:
    through_shell = ["sh", "-c", "no-such-command-here"]
    assert DockerRuntime(NoCli()).exec(box, through_shell).exit_code == 127
    assert attach_run(box, through_shell)[0] == 127
    # A missing executable: the engine itself refuses to start it; both paths report it alike.
    direct = ["no-such-command-here"]
    through_socket = DockerRuntime(NoCli()).exec(box, direct)
    attached = attach_run(box, direct)
    through_command = cli_runtime(monkeypatch).exec(box, direct)
    assert through_socket.exit_code in (126, 127)
    assert (through_socket.exit_code, through_socket.stdout) == (through_command.exit_code, through_command.stdout)
    assert "no-such-command-here" in through_socket.stdout
    assert attached[0] == through_socket.exit_code
    assert attached[1].decode() == through_socket.stdout


def test_stdout_and_stderr_stay_apart(box: str) -> None:
    argv = ["sh", "-c", "echo out; echo err >&2; echo more out; echo more err >&2"]
    result = DockerRuntime(NoCli()).exec(box, argv)
    assert (result.stdout, result.stderr) == ("out\nmore out\n", "err\nmore err\n")
    code, stdout, stderr = attach_run(box, argv)
    assert (code, stdout, stderr) == (0, b"out\nmore out\n", b"err\nmore err\n")


def test_large_output_arrives_intact(box: str) -> None:
    argv = ["sh", "-c", "seq 1 300000; seq 300001 400000 >&2"]
    expected_out = "".join(f"{n}\n" for n in range(1, 300001))
    expected_err = "".join(f"{n}\n" for n in range(300001, 400001))
    assert len(expected_out) > 1024 * 1024
    result = DockerRuntime(NoCli()).exec(box, argv)
    assert result.stdout == expected_out and result.stderr == expected_err
    code, stdout, stderr = attach_run(box, argv)
    assert code == 0 and stdout.decode() == expected_out and stderr.decode() == expected_err


def test_stdin_is_forwarded(box: str) -> None:
    child_env = {**os.environ, "PATH": "/nonexistent"}  # `printf` is the shell's own
    document = json.dumps({"name": box, "argv": ["cat"]})
    piped = subprocess.run(
        f"printf data | {shlex.quote(sys.executable)} -c {shlex.quote(ATTACH)} {shlex.quote(document)}",
        shell=True,
        capture_output=True,
        env=child_env,
        timeout=120,
        check=False,
    )
    assert (piped.returncode, piped.stdout) == (0, b"data"), piped.stderr
    payload = os.urandom(3 * 1024 * 1024)
    code, stdout, _ = attach_run(box, ["sha256sum"], input=payload)
    assert code == 0 and stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    result = DockerRuntime(NoCli()).exec(box, ["sh", "-c", "tee /dev/stderr | wc -c"], stdin=b"captured input")
    assert (result.stdout, result.stderr) == ("14\n", "captured input")


@pytest.mark.parametrize(
    "prelude",
    [
        "",
        "import os; os.close(0)\n",
        "import os; os.dup2(os.open('/', os.O_RDONLY), 0)\n",  # every read fails: a directory
    ],
    ids=["devnull", "closed", "unreadable"],
)
def test_stdin_at_its_end_ends_the_input(box: str, prelude: str) -> None:
    started = time.monotonic()
    code, stdout, stderr = attach_run(box, ["sh", "-c", "cat; echo cat-done"], prelude=prelude)
    assert (code, stdout) == (0, b"cat-done\n"), stderr
    assert time.monotonic() - started < 30


def test_stdin_left_open_does_not_delay_the_return(box: str) -> None:
    process = attach_process(box, ["sh", "-c", "echo finished"], stdin=subprocess.PIPE)
    try:
        assert process.wait(timeout=30) == 0
        assert process.stdout is not None and process.stdout.read() == b"finished\n"
    finally:
        process.kill()
        process.communicate()


def test_env_user_and_workdir(box: str) -> None:
    argv = ["sh", "-c", 'echo "$GREETING|$(id -un)|$(pwd)"']
    runtime = DockerRuntime(NoCli())
    assert runtime.exec(box, argv).stdout == "|dev|/workspace\n"
    chosen = runtime.exec(box, argv, user="root", workdir="/tmp", env={"GREETING": "hi there"})
    assert chosen.stdout == "hi there|root|/tmp\n"
    assert attach_run(box, argv)[:2] == (0, b"|dev|/workspace\n")
    attached = attach_run(box, argv, user="root", workdir="/etc", env={"GREETING": "attached"})
    assert attached[:2] == (0, b"attached|root|/etc\n")


@pytest.mark.parametrize("how", [["stop", "--time", "0"], ["pause"]], ids=["stopped", "paused"])
def test_sandbox_not_running_reads_as_through_the_command(
    own_box: str, how: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert docker(*how, own_box).returncode == 0
    through_socket = error_of(lambda: DockerRuntime(NoCli()).exec(own_box, ["true"]))
    attached = error_of(lambda: DockerRuntime(NoCli()).attach(own_box, ["true"], tty=False))
    through_command = error_of(lambda: cli_runtime(monkeypatch).exec(own_box, ["true"]))
    assert through_socket.message == f"sandbox {own_box} is not running"
    assert same_error(through_socket, through_command)
    assert same_error(attached, through_command)


def test_missing_sandbox_reads_as_through_the_command(image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name = vm_name("gone-" + uuid.uuid4().hex[:14])
    through_socket = error_of(lambda: DockerRuntime(NoCli()).exec(name, ["true"]))
    attached = error_of(lambda: DockerRuntime(NoCli()).attach(name, ["true"], tty=False))
    through_command = error_of(lambda: cli_runtime(monkeypatch).exec(name, ["true"]))
    assert isinstance(through_socket, NotFound) and through_socket.hint
    assert same_error(through_socket, through_command)
    assert same_error(attached, through_command)


def _relay(client: socket.socket, engine: socket.socket) -> None:
    def copy(source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    back = threading.Thread(target=copy, args=(engine, client), daemon=True)
    back.start()
    copy(client, engine)
    back.join()
    client.close()
    engine.close()


@pytest.fixture
def tcp_engine() -> Iterator[tuple[str, list[int]]]:
    """The local engine behind a TCP port, as a remote DOCKER_HOST; also the list of connections made."""
    server = socket.create_server(("127.0.0.1", 0))
    connections: list[int] = []

    def serve(client: socket.socket) -> None:
        engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        engine.connect(docker_api.DEFAULT_SOCKET)
        connections.append(len(connections))
        threading.Thread(target=_relay, args=(client, engine), daemon=True).start()

    loop = AcceptLoop(server, serve)
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}", connections
    loop.close()


def test_other_docker_host_uses_the_command(
    box: str, tcp_engine: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    host, connections = tcp_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    cli = CountingCli()
    result = DockerRuntime(cli).exec(box, ["sh", "-c", "echo via tcp; exit 4"])
    assert (result.exit_code, result.stdout) == (4, "via tcp\n")
    assert cli.commands == ["exec"]
    before = len(connections)
    assert before > 0
    code, stdout, stderr = attach_run(
        box, ["sh", "-c", "cat; exit 5"], input=b"piped", child_env={"PATH": os.environ["PATH"]}
    )
    assert (code, stdout) == (5, b"piped"), stderr
    assert len(connections) > before


def test_socket_that_refuses_falls_back_to_the_command(
    box: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusing = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    refusing.bind(str(tmp_path / "refusing.sock"))
    monkeypatch.setattr(docker_api, "local_socket", lambda environ=None: str(tmp_path / "refusing.sock"))
    cli = CountingCli()
    runtime = DockerRuntime(cli)
    with refusing:
        assert runtime.exec(box, ["sh", "-c", "echo fallback"]).stdout == "fallback\n"
        assert runtime.attach(box, ["sh", "-c", "exit 6"], tty=False) == 6
    assert cli.commands == ["exec", "exec"]


def test_start_of_a_stopped_sandbox(own_box: str) -> None:
    assert docker("stop", "--time", "0", own_box).returncode == 0
    runtime = DockerRuntime(NoCli())
    runtime.start_sandbox(own_box)
    assert running(own_box)
    runtime.start_sandbox(own_box)  # already running: nothing to do, no error
    assert runtime.exec(own_box, ["true"]).exit_code == 0


def test_start_failure_reads_as_through_the_command(
    image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "project"
    name = new_sandbox(workspace)
    try:
        assert docker("stop", "--time", "0", name).returncode == 0
        workspace.rmdir()
        through_socket = error_of(lambda: DockerRuntime(NoCli()).start_sandbox(name))
        through_command = error_of(lambda: cli_runtime(monkeypatch).start_sandbox(name))
        assert isinstance(through_socket, BootFailed)
        assert "bind source path does not exist" in through_socket.message
        assert same_error(through_socket, through_command)
    finally:
        docker("rm", "--force", name)


def running(name: str) -> bool:
    found = docker("inspect", "--type", "container", "--format", "{{json .State.Running}}", name)
    return bool(json.loads(found.stdout or b"false"))


def test_ctrl_c_returns_130_and_leaves_the_program_running(box: str) -> None:
    marker = f"{uuid.uuid4().int % 10000 + 1000}.5"
    process = attach_process(box, ["sh", "-c", f"echo started; exec sleep {marker}"])
    try:
        assert process.stdout is not None and process.stdout.readline() == b"started\n"
        interrupted_at = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
        assert time.monotonic() - interrupted_at < 5
        # As with `docker exec`, which does not forward signals: the program goes on.
        assert docker("exec", box, "pgrep", "-f", f"sleep {marker}").returncode == 0
    finally:
        process.kill()
        process.communicate()
        docker("exec", box, "pkill", "-f", f"sleep {marker}")


def test_closed_output_ends_the_attach(box: str) -> None:
    process = attach_process(box, ["seq", "1", "50000000"])
    assert process.stdout is not None and process.stdout.readline() == b"1\n"
    process.stdout.close()
    assert process.wait(timeout=60) == 141
    process.communicate()


def test_non_blocking_standard_fds(box: str) -> None:
    prelude = "import os; os.set_blocking(0, False); os.set_blocking(1, False)\n"
    process = attach_process(box, ["sh", "-c", "cat; seq 1 300000"], stdin=subprocess.PIPE, prelude=prelude)
    assert process.stdin is not None
    time.sleep(1.0)  # the child's first reads find the pipe empty
    process.stdin.write(b"late\n")
    process.stdin.flush()
    stdout, stderr = process.communicate(timeout=120)  # closes stdin
    assert process.returncode == 0, stderr
    assert stdout == b"late\n" + "".join(f"{n}\n" for n in range(1, 300001)).encode()
