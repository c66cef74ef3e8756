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
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.docker.gated_exec import MARK
from tests.fixtures.gated import (
    Gated,
    attacker,
    confined_sandbox,
    end_children,
    gates,
    in_box,
    runs_of,
    the_gate,
    traced,
    wait_in_box,
    wait_until_held,
)
from tests.fixtures.images import RunnerBase
from tests.runtime.conftest import docker

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def no_child_left() -> Iterator[None]:
    """Every child a test made (launchers, attackers) ends with it, whatever the outcome."""
    yield
    end_children()


@pytest.fixture
def box(runner_base_image: RunnerBase, tmp_path: Path) -> Iterator[str]:
    yield from confined_sandbox(runner_base_image, tmp_path / "workspace", "sgate")


# A program of dev's for every name the gate might look up on a PATH: it says the gate opened.
FAKE_PROGRAM = """#!/bin/sh
echo 'opencode-sandbox: the gate opened'
"""


# What dev writes to a gate's input to open it itself: a line, and a command of its own.
def open_gate_script(opened: str) -> str:
    return f'printf "chosen\\ntouch /tmp/{opened}\\n" > /proc/$1/fd/0'


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
    wait_in_box(box, f"test -e /tmp/{opened}", "the attack did not get through the gate")
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
    wait_until_held(box, gate, "sleep")
    gated.ended()
    time.sleep(1.0)  # what the gate would do with its input ended, it does now
    opened = uuid.uuid4().hex
    attack = in_box(box, open_gate_script(opened), gate)
    assert attack.returncode == 0, attack.stderr
    wait_in_box(box, f"test -e /tmp/{opened}", "the attack did not get through the gate")
    assert gated.leave() == 0
    assert runs_of(box, trace) == 0, "a gate the launcher ended ran its command"


# The token protocol: the token read off the gate's input, the mark off its output, the command's
# words as the gate reads them (each against plain `docker exec`).
def test_a_reader_on_the_gate_input_learns_nothing_before_the_launcher_word(box: str, tmp_path: Path) -> None:
    """dev holds a second reader on its gate's input (and reads every process's arguments and
    environment) until the launcher's word: nothing of the command, nor the token, is there before,
    and the command has not started."""
    trace = uuid.uuid4().hex
    out = uuid.uuid4().hex
    gated = Gated(box, traced(trace, "echo ran"), tmp_path)
    gate = the_gate(box)
    thief = attacker(box, f"exec cat /proc/{gate}/fd/0 > /tmp/{out}")
    wait_until_held(box, gate, "cat")
    time.sleep(1.0)  # whatever reached the gate's input now, the thief would have a chance to read
    everything = in_box(box, "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null; cat /tmp/" + out)
    assert trace.encode() not in everything.stdout
    assert in_box(box, f"test -s /tmp/{out}").returncode != 0, "dev read something before the launcher's word"
    assert runs_of(box, trace) == 0
    # After its word, the gate and the thief race for each line the launcher writes, and either may
    # win: dev may read it then, and may break its own gate; no outcome is claimed.
    Path(f"{gated.ready}.go").touch()
    thief.kill()
    in_box(box, f"kill -KILL {gate} 2>/dev/null")
    gated.process.communicate(timeout=60)


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
