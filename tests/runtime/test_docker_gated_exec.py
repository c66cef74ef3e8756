"""A command made ready in a running container (`DockerRuntime.prepare_command`), on real containers of
the runner base image: nothing of it runs before the launcher opens the gate, whatever the VM writes to
the gate; once opened, it is the command `docker exec` would run, its streams and exit code exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.docker.gated_exec import MARK, GatedExec
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from tests.fixtures.images import RunnerBase
from tests.runtime.conftest import docker

pytestmark = pytest.mark.docker

PREPARED = """
import json, os, sys, time
from opencode_sandbox.runtime.docker.backend import DockerRuntime
options = json.loads(sys.argv[1])
prepared = DockerRuntime().prepare_command(options["name"], options["argv"], user=options["user"])
if prepared is None:
    sys.exit(99)
ready = options["ready"]
open(ready, "w").close()  # the gate is made: the test may act, then says to go on
while not os.path.exists(ready + ".go"):
    time.sleep(0.02)
if options["end"]:
    prepared.end()
    sys.exit(0)
sys.exit(prepared.run())
"""


class Gated:
    """A child that makes `argv` ready in the box, waits for the test's word, then runs or ends it."""

    def __init__(self, box: str, argv: list[str], folder: Path, *, user: str = "dev", end: bool = False,
                 stdin: Any = subprocess.DEVNULL) -> None:
        self.ready = folder / f"ready-{uuid.uuid4().hex[:8]}"
        document = json.dumps({"name": box, "argv": argv, "user": user, "ready": str(self.ready), "end": end})
        self.process = subprocess.Popen([sys.executable, "-c", PREPARED, document], stdin=stdin,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**os.environ, "PATH": "/nonexistent"})
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"the command was not made ready: {self.process.communicate()}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()

    def go_on(self, input: bytes | None = None) -> tuple[int, bytes, bytes]:
        Path(f"{self.ready}.go").touch()
        stdout, stderr = self.process.communicate(input, timeout=120)
        return self.process.returncode, stdout, stderr


@pytest.fixture(autouse=True)
def no_child_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every child a test made ends with it, whatever the test's outcome (its gate with it)."""
    made: list[Gated] = []
    original = Gated.__init__

    def tracked(self: Gated, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Gated, "__init__", tracked)
    yield
    for each in made:
        if hasattr(each, "process"):
            each.kill()


@pytest.fixture(scope="module")
def box(runner_base_image: RunnerBase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _sandbox(runner_base_image, tmp_path_factory.mktemp("workspace"))


@pytest.fixture
def own_box(runner_base_image: RunnerBase, tmp_path: Path) -> Iterator[str]:
    """A sandbox of the test's own, for a test that breaks it."""
    yield from _sandbox(runner_base_image, tmp_path / "workspace")


def _sandbox(base: RunnerBase, workspace: Path) -> Iterator[str]:
    slug = "dgate-" + uuid.uuid4().hex[:14]
    workspace.mkdir(parents=True, exist_ok=True)
    name = vm_name(slug)
    DockerRuntime().create_sandbox(SandboxSpec(name, base.result.reference, 1, 256, labels=managed_labels(slug),
                                               mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),)))
    try:
        yield name
    finally:
        docker("rm", "--force", name)


def in_box(box: str, script: str, user: str = "dev") -> subprocess.CompletedProcess[bytes]:
    return docker("exec", "--user", user, box, "sh", "-c", script)


def runs_of(box: str, trace: str) -> int:
    """How many times the command of `trace` started."""
    return len(in_box(box, f"cat /tmp/{trace} 2>/dev/null").stdout.splitlines())


def gates(box: str) -> list[str]:
    """The ids of the gates waiting in the box."""
    pattern = "[" + MARK.decode()[0] + "]" + MARK.decode().strip()[1:]  # the pattern does not match itself
    return in_box(box, f"pgrep -f '{pattern}' || true", user="root").stdout.decode().split()


def traced(trace: str, then: str = "") -> list[str]:
    return ["sh", "-c", f"echo started >> /tmp/{trace}; {then}"]


def test_the_command_starts_only_when_the_gate_opens_and_runs_as_docker_exec_would(box: str, tmp_path: Path) -> None:
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace, 'echo "out $(id -un) $(pwd) $HOME"; echo err >&2; exit 7'), tmp_path)
    time.sleep(1.0)
    assert runs_of(box, trace) == 0
    assert len(gates(box)) == 1
    code, stdout, stderr = gated.go_on()
    assert (code, stdout, stderr) == (7, b"out dev /workspace /home/dev\n", b"err\n")
    assert runs_of(box, trace) == 1
    assert gates(box) == []


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
    import hashlib

    assert code == 0 and stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    code, stdout, _ = Gated(box, ["sh", "-c", "cat; echo done"], tmp_path).go_on()
    assert (code, stdout) == (0, b"done\n")


def test_an_ended_gate_starts_nothing_and_leaves_nothing(box: str, tmp_path: Path) -> None:
    trace = uuid.uuid4().hex
    assert Gated(box, traced(trace), tmp_path, end=True).go_on()[0] == 0
    deadline = time.monotonic() + 10
    while gates(box) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gates(box) == []
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
    [gate] = gates(box)
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


def test_nothing_is_made_ready_in_a_stopped_sandbox(own_box: str) -> None:
    docker("stop", "--time", "0", own_box)
    assert DockerRuntime().prepare_command(own_box, ["true"]) is None
