"""A command made ready in a running container (`DockerRuntime.prepare_command`), on real containers of
the runner base image: nothing of it runs before the launcher opens the gate, whatever the VM writes to
the gate; once opened, it is the command `docker exec` would run, its streams and exit code exact."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.docker.gated_exec import MARK, GatedExec
from tests.fixtures.gated import Gated, confined_sandbox, end_children, gates, in_box, runs_of, the_gate, traced
from tests.fixtures.images import RunnerBase
from tests.runtime.conftest import docker

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def no_child_left() -> Iterator[None]:
    """Every child a test made ends with it, whatever the test's outcome (its gate with it)."""
    yield
    end_children()


@pytest.fixture(scope="module")
def box(runner_base_image: RunnerBase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from confined_sandbox(runner_base_image, tmp_path_factory.mktemp("workspace"), "dgate")


@pytest.fixture
def own_box(runner_base_image: RunnerBase, tmp_path: Path) -> Iterator[str]:
    """A sandbox of the test's own, for a test that breaks it."""
    yield from confined_sandbox(runner_base_image, tmp_path / "workspace", "dgate")


def test_the_command_starts_only_when_the_gate_opens_and_runs_as_docker_exec_would(box: str, tmp_path: Path) -> None:
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace, 'echo "out $(id -un) $(pwd) $HOME"; echo err >&2; exit 7'), tmp_path)
    the_gate(box)
    time.sleep(1.0)
    assert runs_of(box, trace) == 0
    assert len(gates(box)) == 1
    code, stdout, stderr = gated.go_on()
    assert (code, stdout, stderr) == (7, b"out dev /workspace /home/dev\n", b"err\n")
    assert runs_of(box, trace) == 1
    assert gates(box) == []


def test_an_error_the_command_writes_as_it_starts_reaches_the_user(box: str, tmp_path: Path) -> None:
    """The engine keeps no order between the command's two streams: its first error can come before
    the mark the gate wrote on its output just before it became the command (lost one run in five
    when the launcher dropped it)."""
    outcomes = [Gated(box, ["sh", "-c", "echo err >&2; exit 3"], tmp_path).go_on() for _ in range(20)]
    assert all(outcome == (3, b"", b"err\n") for outcome in outcomes), outcomes


def test_the_environment_is_the_one_docker_exec_gives(box: str, tmp_path: Path) -> None:
    plain = docker("exec", "--user", "dev", "--workdir", "/workspace", "--env", "HOME=/home/dev", box, "env")
    code, stdout, _ = Gated(box, ["env"], tmp_path).go_on()
    assert code == 0 and sorted(stdout.splitlines()) == sorted(plain.stdout.splitlines())


def test_root_is_root(box: str, tmp_path: Path) -> None:
    code, stdout, _ = Gated(box, ["id", "-un"], tmp_path, user="root").go_on()
    assert (code, stdout) == (0, b"root\n")


def test_the_input_reaches_the_command_after_the_gate_and_only_the_command(box: str, tmp_path: Path) -> None:
    payload = os.urandom(256 * 1024)
    gated = Gated(box, ["sha256sum"], tmp_path, stdin=subprocess.PIPE)
    code, stdout, _ = gated.go_on(payload)
    assert code == 0 and stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    code, stdout, _ = Gated(box, ["sh", "-c", "cat; echo done"], tmp_path).go_on()
    assert (code, stdout) == (0, b"done\n")


def test_an_ended_gate_starts_nothing_and_leaves_nothing(box: str, tmp_path: Path) -> None:
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace), tmp_path, end=True)
    gated.ended()
    deadline = time.monotonic() + 10
    while gates(box) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gates(box) == []
    assert gated.leave() == 0
    assert runs_of(box, trace) == 0


@pytest.mark.parametrize(("gate_user", "attacker"), [("dev", "dev"), ("root", "root"), ("dev", "root")],
                         ids=["dev's gate by dev", "root's gate by root", "dev's gate by root"])
@pytest.mark.parametrize("written", ["go\n", "\n", "a guess\n" * 3, "a line\ntrue\n"],
                         ids=["go", "empty", "guesses", "a line and a command"])
def test_the_vm_cannot_open_the_gate_by_writing_to_its_input(box: str, tmp_path: Path, gate_user: str, attacker: str,
                                                            written: str) -> None:
    """The agent writes to the gate's input through /proc: the command does not start then, and runs
    once when the launcher goes on (anew, as the gate it broke refused)."""
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "id -un"), tmp_path, user=gate_user)
    gate = the_gate(box)
    attack = in_box(box, f"printf '%s' '{written}' > /proc/{gate}/fd/0", user=attacker)
    if attacker == gate_user:  # the write is possible: the gate must not trust what it reads
        assert attack.returncode == 0, attack.stderr
    time.sleep(1.0)
    assert runs_of(box, trace) == 0
    code, stdout, stderr = gated.go_on()
    assert (code, stdout) == (0, f"{gate_user}\n".encode()), stderr
    assert runs_of(box, trace) == 1


def test_a_vm_without_what_the_gate_needs_runs_the_command_as_without_it(own_box: str, tmp_path: Path) -> None:
    assert in_box(own_box, "rm /usr/bin/sha256sum", user="root").returncode == 0
    trace = uuid.uuid4().hex
    code, stdout, stderr = Gated(own_box, traced(trace, "echo ran; exit 4"), tmp_path).go_on()
    assert (code, stdout, stderr) == (4, b"ran\n", b"")
    assert runs_of(own_box, trace) == 1


def test_a_command_the_vm_cannot_find_fails_as_docker_exec_fails(box: str, tmp_path: Path) -> None:
    plain = docker("exec", "--user", "dev", box, "no-such-command-here")
    code, stdout, stderr = Gated(box, ["no-such-command-here"], tmp_path).go_on()
    assert code == plain.returncode != 0
    assert b"no-such-command-here" in stdout + stderr
    assert MARK not in stdout


@pytest.mark.parametrize(("argv", "gated"), [
    (["true"], True), (["echo", "x"], True), (["/bin/true"], True),
    (["cd", "/"], False), (["no-such-command-here"], False), (["/tmp"], False),
], ids=["a program and a builtin", "echo", "a path", "a builtin only", "missing", "a folder"])
def test_the_gate_takes_every_program_the_engine_could_start_and_nothing_else(
        box: str, argv: list[str], gated: bool, capfd: pytest.CaptureFixture[str]) -> None:
    """What only the plain exec would run right (a builtin, nothing, a folder) is left to it: the
    engine's own errors; a program, whatever the gate's shell has of the same name, goes through."""
    plain = docker("exec", "--user", "dev", box, *argv)
    saved = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    try:
        prepared = DockerRuntime().prepare_command(box, argv)
        assert isinstance(prepared, GatedExec)
        code = prepared.run()
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(null)
    assert prepared.opened is gated
    assert code == plain.returncode
    assert capfd.readouterr().out.encode() == plain.stdout


def test_a_vm_removed_while_the_command_runs_ends_it_as_a_kill(own_box: str, tmp_path: Path) -> None:
    """As under `docker exec`: the command's end is the kill's, 137, and the launcher says nothing else."""
    gated = Gated(own_box, ["sh", "-c", "echo started; exec sleep 60"], tmp_path)
    Path(f"{gated.ready}.go").touch()
    assert gated.process.stdout is not None and gated.process.stdout.readline() == b"started\n"
    docker("rm", "--force", own_box)
    code, _, stderr = gated.go_on(timeout=60)
    assert (code, stderr) == (137, b"")


def test_nothing_is_made_ready_in_a_stopped_sandbox(own_box: str) -> None:
    docker("stop", "--time", "0", own_box)
    assert DockerRuntime().prepare_command(own_box, ["true"]) is None
