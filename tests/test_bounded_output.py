"""`run_bounded`: a local command's output held up to a limit, on real processes of the host's sh."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from opencode_sandbox.bounded_output import Held, OutputOverLimit, run_bounded

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def sh(script: str, *, stdin: bytes | None = None, limit: int = 1 << 20,
       timeout_s: float | None = 10) -> subprocess.CompletedProcess[bytes]:
    return run_bounded(["sh", "-c", script], stdin=stdin, timeout_s=timeout_s, env=ENV, limit=limit)


def test_both_streams_and_the_exit_code_come_back_as_subprocess_run_gives_them() -> None:
    data = os.urandom(300_000)  # more than a pipe holds: written while the output is read
    done = sh("cat; echo err >&2; exit 3", stdin=data)
    assert (done.returncode, done.stdout, done.stderr) == (3, data, b"err\n")


def test_input_the_process_never_reads_is_dropped_and_the_run_still_ends() -> None:
    done = sh("exec true", stdin=b"x" * (1 << 20))
    assert (done.returncode, done.stdout) == (0, b"")


@pytest.mark.parametrize("stream", ["", ">&2"])
def test_a_stream_past_the_limit_raises_and_the_writer_is_killed_without_being_read_to_its_end(stream: str) -> None:
    began = time.monotonic()
    with pytest.raises(OutputOverLimit) as over:
        sh(f"while :; do echo 0123456789abcdef; done {stream}", limit=64 << 10, timeout_s=30)
    assert over.value.limit == 64 << 10
    assert time.monotonic() - began < 10, "the endless writer was stopped at the limit, not at the timeout"


def test_output_of_exactly_the_limit_is_held_whole() -> None:
    assert sh("printf %04096d 0", limit=4096).stdout == b"0" * 4096


def test_a_process_that_does_not_end_is_killed_at_the_timeout() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        sh("exec sleep 30", timeout_s=0.5)


def test_one_that_closes_its_streams_and_lingers_is_killed_at_the_timeout_too() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        sh("exec >/dev/null 2>&1; sleep 30", timeout_s=0.5)


def test_held_counts_each_stream_on_its_own() -> None:
    held = Held(4)
    held.add(1, b"abcd")
    held.add(2, b"abcd")
    with pytest.raises(OutputOverLimit):
        held.add(1, b"e")
