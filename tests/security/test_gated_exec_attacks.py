"""A hostile VM against the gate of a command made ready while the start checks
(`DockerRuntime.prepare_command`, `runtime/docker/gated_exec.py`), on real confined containers of the
runner base image.

The gate's claims: nothing in the VM learns the command, or starts it, before the launcher's word
(its token, written once the start kept the VM); a gate the launcher ended never learns it; a gate
the VM reached gets no command, took none of the user's input, and the command then runs once, as
`docker exec` runs it. Each test is one attack by the agent (`dev`, or root in the VM) and passes
when the gate holds. The gate runs as the user the command runs as, so what `dev` may do to any
process of its own (read and write its input, output and memory through /proc) it may do to its gate.
"""

from __future__ import annotations

import hashlib
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

# The launcher's side, in a child of its own: makes the command ready, says so with a file, waits
# for the test's word (a second file), then opens the gate or ends it.
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
if options["end"]:
    prepared.end()
    open(ready + ".ended", "w").close()
    while not os.path.exists(ready + ".leave"):
        time.sleep(0.02)
    sys.exit(0)
sys.exit(prepared.run())
"""

# What dev writes to a gate's input to open it itself: a line, and a command of its own.
def open_gate_script(opened: str) -> str:
    return f'printf "chosen\\ntouch /tmp/{opened}\\n" > /proc/$1/fd/0'


# A program of dev's for every name the gate might look up on a PATH: it says the gate opened.
FAKE_PROGRAM = """#!/bin/sh
echo 'opencode-sandbox: the gate opened'
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
        _made.append(self)
        self._wait_for(self.ready, "the command was not made ready")

    def _wait_for(self, path: Path, what: str) -> None:
        deadline = time.monotonic() + 60
        while not path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"{what}: {self.process.communicate()}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()

    def go_on(self, input: bytes | None = None) -> tuple[int, bytes, bytes]:
        Path(f"{self.ready}.go").touch()
        stdout, stderr = self.process.communicate(input, timeout=120)
        return self.process.returncode, stdout, stderr

    def ended(self) -> None:
        """For a child made with `end`: the launcher ended the gate; it stays until `leave`."""
        Path(f"{self.ready}.go").touch()
        self._wait_for(Path(f"{self.ready}.ended"), "the gate was not ended")

    def leave(self) -> int:
        Path(f"{self.ready}.leave").touch()
        self.process.communicate(timeout=60)
        return self.process.returncode


_made: list[Gated] = []


@pytest.fixture(autouse=True)
def no_child_left() -> Iterator[None]:
    """Every launcher child a test made ends with it, whatever the test's outcome."""
    yield
    while _made:
        _made.pop().kill()


@pytest.fixture
def box(runner_base_image: RunnerBase, tmp_path: Path) -> Iterator[str]:
    """A confined sandbox of the test's own (the attacks break things in it), removed afterwards."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    workspace.chmod(0o777)  # as in a real VM, where the checkout is dev's
    slug = "sgate-" + uuid.uuid4().hex[:14]
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


def runs_of(box: str, trace: str) -> int:
    """How many times the command of `trace` started."""
    return len(in_box(box, f"cat /tmp/{trace} 2>/dev/null").stdout.splitlines())


def gates(box: str) -> list[str]:
    """The ids of the gates waiting in the box."""
    pattern = "[" + MARK.decode()[0] + "]" + MARK.decode().strip()[1:]  # the pattern does not match itself
    return in_box(box, f"pgrep -f '{pattern}' || true", user="root").stdout.decode().split()


def the_gate(box: str) -> str:
    deadline = time.monotonic() + 10
    while not (found := gates(box)) and time.monotonic() < deadline:
        time.sleep(0.05)
    [gate] = found
    return gate


def traced(trace: str, then: str = "") -> list[str]:
    return ["sh", "-c", f"echo started >> /tmp/{trace}; {then}"]


def test_dev_that_opens_its_gate_early_learns_nothing_of_the_command_and_starts_none_of_it(
        box: str, tmp_path: Path) -> None:
    """`dev` reads its gate's arguments and environment, then writes a line and a command of its own
    to it: the gate runs dev's command (as dev could anyway), and the user's is nowhere in the VM
    until the launcher goes on, then runs once."""
    trace = uuid.uuid4().hex
    opened = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "echo ran"), tmp_path)
    gate = the_gate(box)
    seen = in_box(box, 'cat /proc/$1/cmdline /proc/$1/environ', gate)
    assert seen.returncode == 0 and seen.stdout, seen.stderr
    assert trace.encode() not in seen.stdout
    attack = in_box(box, open_gate_script(opened), gate)
    assert attack.returncode == 0, attack.stderr
    time.sleep(1.0)
    assert in_box(box, f"test -e /tmp/{opened}").returncode == 0, "the attack did not get through the gate"
    assert runs_of(box, trace) == 0
    code, stdout, stderr = gated.go_on()
    assert (code, stdout) == (0, b"ran\n"), stderr
    assert runs_of(box, trace) == 1


def test_dev_cannot_open_its_gate_with_programs_of_its_own(box: str, tmp_path: Path) -> None:
    """`dev` puts a program for every name the gate might look up wherever dev may write and a shell
    might look, and a profile for a shell that reads one: the gate runs none of them."""
    planted = in_box(box, """
        set -e
        for folder in /workspace /workspace/bin /home/dev/bin /home/dev/.local/bin /tmp; do
            mkdir -p "$folder"
            for name in sh read echo eval command unset exec printf sha256sum; do
                printf '%s' "$1" > "$folder/$name"
                chmod 755 "$folder/$name"
            done
        done
        for profile in /home/dev/.profile /home/dev/.shrc /workspace/.profile; do
            echo 'PATH=/tmp:$PATH; export PATH' > "$profile"
        done
    """, FAKE_PROGRAM)
    assert planted.returncode == 0, planted.stderr
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "echo ran"), tmp_path)
    time.sleep(1.0)
    assert runs_of(box, trace) == 0
    code, stdout, stderr = gated.go_on()
    assert (code, stdout) == (0, b"ran\n"), stderr
    assert runs_of(box, trace) == 1


def test_dev_cannot_reach_a_root_gate(box: str, tmp_path: Path) -> None:
    """`shell --root`: the gate runs as root, and `dev` can neither write its input or output nor its memory."""
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "id -un"), tmp_path, user="root")
    gate = the_gate(box)
    writes = [in_box(box, f'printf "guess\\n" > /proc/$1/fd/{fd}', gate) for fd in (0, 1)]
    memory = in_box(box, 'exec 3</proc/$1/mem', gate)
    assert all(each.returncode != 0 for each in writes), [each.stderr for each in writes]
    assert memory.returncode != 0, memory.stderr
    time.sleep(0.5)
    assert runs_of(box, trace) == 0
    code, stdout, stderr = gated.go_on()
    assert (code, stdout) == (0, b"root\n"), stderr
    assert runs_of(box, trace) == 1


def test_dev_cannot_make_the_launcher_run_the_command_twice_through_the_gates_output(box: str,
                                                                                    tmp_path: Path) -> None:
    """`dev` writes a byte on its gate's output (/proc/PID/fd/1) before the launcher reads it: the
    launcher takes the gate for refused, while the gate itself still gets the token, opens and runs
    the command unseen; the launcher then runs it again."""
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "echo ran"), tmp_path)
    attack = in_box(box, 'printf "x" > /proc/$1/fd/1', the_gate(box))
    assert attack.returncode == 0, attack.stderr
    code, stdout, stderr = gated.go_on()
    assert (code, stdout) == (0, b"ran\n"), stderr
    time.sleep(0.5)
    assert runs_of(box, trace) == 1, "the launcher's one command ran more than once"


def test_a_mark_the_vm_forges_does_not_stand_for_a_command_that_never_ran(box: str, tmp_path: Path) -> None:
    """`dev` writes the mark on its gate's output and a wrong line on its input: the gate refuses and
    ends without the command, yet the launcher saw the mark first; it must not report the gate's
    refusal as the command's exit, nor spend the user's input on it."""
    trace = uuid.uuid4().hex
    payload = os.urandom(64 * 1024)
    gated = Gated(box, traced(trace, "sha256sum"), tmp_path, stdin=subprocess.PIPE)
    gate = the_gate(box)
    attack = in_box(box, 'printf "%s" "$2" > /proc/$1/fd/1 && printf "wrong\\n" > /proc/$1/fd/0', gate,
                    MARK.decode())
    assert attack.returncode == 0, attack.stderr
    deadline = time.monotonic() + 10
    while gate in gates(box) and time.monotonic() < deadline:
        time.sleep(0.05)
    code, stdout, stderr = gated.go_on(payload)
    assert runs_of(box, trace) == 1, f"the command did not run, yet the launcher said {code}: {stdout!r} {stderr!r}"
    assert (code, stdout.split()[:1]) == (0, [hashlib.sha256(payload).hexdigest().encode()])


def test_a_gate_dev_kills_took_none_of_the_input_and_the_command_runs_once(box: str, tmp_path: Path) -> None:
    """`dev` kills its gate before the launcher opens it: no mark, so the launcher runs the command
    anew, with all of the user's input."""
    trace = uuid.uuid4().hex
    payload = os.urandom(256 * 1024)
    gated = Gated(box, traced(trace, "sha256sum"), tmp_path, stdin=subprocess.PIPE)
    attack = in_box(box, "kill -KILL $1", the_gate(box))
    assert attack.returncode == 0, attack.stderr
    code, stdout, stderr = gated.go_on(payload)
    assert (code, stdout.split()[:1]) == (0, [hashlib.sha256(payload).hexdigest().encode()]), stderr
    assert runs_of(box, trace) == 1


def test_a_gate_the_launcher_ended_never_runs_the_command(box: str, tmp_path: Path) -> None:
    """The start changed nothing it would recreate, yet failed (or the user's start was refused): the
    launcher ends the gate by closing its input. `dev` held a second writer on that input, so the
    gate never reads its end; later, `dev` opens it with a line and a command of its own: the
    command the launcher dropped must not run after all."""
    trace = uuid.uuid4().hex
    gated = Gated(box, traced(trace), tmp_path, end=True)
    gate = the_gate(box)
    holder = docker("exec", "--detach", "--user", "dev", box, "sh", "-c", f"exec 9>/proc/{gate}/fd/0; sleep 30")
    assert holder.returncode == 0, holder.stderr
    time.sleep(0.5)
    gated.ended()
    time.sleep(1.0)
    opened = uuid.uuid4().hex
    attack = in_box(box, open_gate_script(opened), gate)
    assert attack.returncode == 0, attack.stderr
    time.sleep(1.0)
    assert gated.leave() == 0
    assert in_box(box, f"test -e /tmp/{opened}").returncode == 0, "the attack did not get through the gate"
    assert runs_of(box, trace) == 0, "a gate the launcher ended ran its command"
