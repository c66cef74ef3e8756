"""A hostile VM against the token protocol of the gate (`runtime/docker/gated_exec.py`): the token
read off the gate's input, the mark read off its output, the command's words as the gate reads them.

Each test is one attack (or one fidelity check against plain `docker exec`) and passes when the
gate holds; a successful attack makes it fail.
"""

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
from opencode_sandbox.runtime.docker.gated_exec import MARK
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from tests.fixtures.images import RunnerBase
from tests.runtime.conftest import docker

pytestmark = pytest.mark.docker

# The launcher's side, in a child of its own, as in test_gated_exec_attacks.py.
PREPARED = """
import json, os, sys, time
from opencode_sandbox.runtime.docker.backend import DockerRuntime
options = json.loads(sys.argv[1])
prepared = DockerRuntime().prepare_command(options["name"], options["argv"], user=options["user"])
if prepared is None:
    sys.exit(99)
ready = options["ready"]
open(ready, "w").close()
while not os.path.exists(ready + ".go"):
    time.sleep(0.02)
sys.exit(prepared.run())
"""


class Gated:
    """A child that makes `argv` ready in the box, waits for the test's word, then runs it."""

    def __init__(self, box: str, argv: list[str], folder: Path, *, stdin: Any = subprocess.DEVNULL) -> None:
        self.ready = folder / f"ready-{uuid.uuid4().hex[:8]}"
        document = json.dumps({"name": box, "argv": argv, "user": "dev", "ready": str(self.ready)})
        self.process = subprocess.Popen([sys.executable, "-c", PREPARED, document], stdin=stdin,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**os.environ, "PATH": "/nonexistent"})
        _made.append(self.process)
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"the command was not made ready: {self.process.communicate()}")
            time.sleep(0.02)

    def go_on(self, input: bytes | None = None, timeout: float = 60) -> tuple[int, bytes, bytes]:
        Path(f"{self.ready}.go").touch()
        stdout, stderr = self.process.communicate(input, timeout=timeout)
        return self.process.returncode, stdout, stderr


_made: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def no_child_left() -> Iterator[None]:
    """Every child a test made (launchers, attackers) ends with it, whatever the outcome."""
    yield
    while _made:
        process = _made.pop()
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.fixture
def box(runner_base_image: RunnerBase, tmp_path: Path) -> Iterator[str]:
    """A confined sandbox of the test's own, removed afterwards."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    workspace.chmod(0o777)
    slug = "pgate-" + uuid.uuid4().hex[:14]
    name = vm_name(slug)
    try:
        DockerRuntime().create_sandbox(SandboxSpec(name, runner_base_image.result.reference, 1, 256,
                                                   labels=managed_labels(slug),
                                                   mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),)))
        yield name
    finally:
        docker("rm", "--force", name)


def in_box(box: str, script: str, *args: str, user: str = "dev") -> subprocess.CompletedProcess[bytes]:
    return docker("exec", "--user", user, box, "sh", "-c", script, "attack", *args)


def attacker(box: str, script: str, *args: str) -> subprocess.Popen[bytes]:
    """A process of dev's in the box that runs `script` on its own while the test goes on."""
    process = subprocess.Popen(["docker", "exec", "--user", "dev", box, "sh", "-c", script, "attack", *args],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _made.append(process)
    return process


def runs_of(box: str, trace: str) -> int:
    return len(in_box(box, f"cat /tmp/{trace} 2>/dev/null").stdout.splitlines())


def the_gate(box: str) -> str:
    pattern = "[" + MARK.decode()[0] + "]" + MARK.decode().strip()[1:]
    deadline = time.monotonic() + 10
    while True:
        found = in_box(box, f"pgrep -f '{pattern}' || true", user="root").stdout.decode().split()
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    [gate] = found
    return gate


def traced(trace: str, then: str = "") -> list[str]:
    return ["sh", "-c", f"echo started >> /tmp/{trace}; {then}"]


def wait_for_file(box: str, path: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while in_box(box, f"test -s {path}").returncode != 0:
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.05)


def test_a_reader_on_the_gate_input_learns_nothing_before_the_launcher_word(box: str, tmp_path: Path) -> None:
    """dev holds a second reader on its gate's input (and reads every process's arguments and
    environment) until the launcher's word: nothing of the command, nor the token, is there before,
    and the command has not started."""
    trace = uuid.uuid4().hex
    out = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "echo ran"), tmp_path)
    gate = the_gate(box)
    thief = attacker(box, f"exec cat /proc/{gate}/fd/0 > /tmp/{out}")
    time.sleep(1.5)
    everything = in_box(box, "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null; cat /tmp/" + out)
    assert trace.encode() not in everything.stdout
    assert in_box(box, f"test -s /tmp/{out}").returncode != 0, "dev read something before the launcher's word"
    assert runs_of(box, trace) == 0
    Path(f"{gated.ready}.go").touch()
    wait_for_file(box, f"/tmp/{out}")  # dev reads what the launcher sends after its word: allowed
    thief.kill()
    in_box(box, f"kill -KILL {gate} 2>/dev/null")
    gated.process.communicate(timeout=60)  # dev broke its gate after the word: no outcome claimed


NASTY = ["", " ", "-e", "--", "-", "'", '"', "\\", "\\\\n", "'\"'\"'", "$HOME", "${HOME}", "`id`", "$(id)",
         "*", "~", "~dev", "a b\tc", "\r", "x\ry", "\x01\x02\x1b[31m", "\x7f", "é ü 漢字 🚀", "%s%n", "!", "#c",
         ";true", "&&", "|", ">/tmp/x", "<", "{a,b}", "[a]", "?", "=", "A=B", "IFS=x", "\\'", "'\\", "\u00a0",
         "\u2028", "x" * 100_000]
SHOW = 'for a; do printf "%s" "$a" | od -An -tx1 -v | tr -d " \\n"; echo; done'


def test_the_words_reach_the_command_byte_for_byte_as_docker_exec_gives_them(box: str, tmp_path: Path) -> None:
    argv = ["sh", "-c", SHOW, "zero", *NASTY]
    plain = docker("exec", "--user", "dev", "--workdir", "/workspace", box, *argv)
    assert plain.returncode == 0, plain.stderr
    code, stdout, stderr = Gated(box, argv, tmp_path).go_on()
    assert code == 0, stderr
    assert stdout == plain.stdout
    assert len(stdout.splitlines()) == len(NASTY)


@pytest.mark.parametrize("argv", [["-x"], ["--"], ["$(touch /tmp/pwned)"], ["`touch /tmp/pwned`"],
                                  ["x;touch /tmp/pwned"], ["'"], ["\\"]],
                         ids=["dash", "double dash", "substitution", "backticks", "semicolon", "quote", "backslash"])
def test_a_command_name_the_gate_reads_is_only_a_name(box: str, tmp_path: Path, argv: list[str]) -> None:
    """Odd first words: nothing of them runs in the gate's shell; the outcome is docker exec's."""
    plain = docker("exec", "--user", "dev", box, *argv)
    code, _, _ = Gated(box, argv, tmp_path).go_on()
    assert in_box(box, "test -e /tmp/pwned").returncode != 0, "the gate's shell ran a part of a word"
    assert code == plain.returncode


@pytest.mark.parametrize("argv", [["cd", "/"], ["read", "x"], ["exit", "0"], ["/etc/passwd"], ["/tmp"]],
                         ids=["cd builtin", "read builtin", "exit builtin", "not executable", "folder"])
def test_a_first_word_docker_exec_cannot_run_fails_as_it_fails(box: str, tmp_path: Path, argv: list[str]) -> None:
    """Shell builtins pass the gate's `command -v`, yet are no program; docker exec's exit is the
    one to give, and the mark must never reach the user."""
    plain = docker("exec", "--user", "dev", box, *argv)
    code, stdout, _ = Gated(box, argv, tmp_path).go_on()
    assert MARK not in stdout
    assert code == plain.returncode, (code, plain.returncode, plain.stderr)


def test_a_command_that_itself_exits_97_runs_once_and_says_97(box: str, tmp_path: Path) -> None:
    trace = uuid.uuid4().hex
    code, stdout, stderr = Gated(box, traced(trace, "echo ran; exit 97"), tmp_path).go_on()
    assert (code, stdout) == (97, b"ran\n"), stderr
    assert runs_of(box, trace) == 1


def test_a_word_that_is_not_utf8_does_not_break_the_launcher(box: str) -> None:
    """A word from a host argv with bytes that are not UTF-8 (Python keeps them as surrogates): the
    plain exec sends it; making the command ready must not fail with an error of its own."""
    word = os.fsdecode(b"caf\xe9")
    try:
        prepared = DockerRuntime().prepare_command(box, ["echo", word])
    except UnicodeError as error:
        pytest.fail(f"prepare_command raised {error!r}")
    if prepared is not None:
        prepared.end()
