"""A process's output held up to a limit: what a VM writes in answer to a command is the VM's to
make as large as it likes, and must not fill the host's memory.

`Held` collects the two streams of an exec however they arrive; `run_bounded` is
`subprocess.run(..., capture_output=True)` for a local command (the `docker` or `msb` command
that runs the exec), killing it once one of its streams passes the limit.
"""

from __future__ import annotations

import os
import select
import selectors
import time
from collections.abc import Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

STDOUT = 1
STDERR = 2
_CHUNK = 65536


class OutputOverLimit(Exception):
    """One stream passed the limit; nothing more of it is read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"its output passed {limit} bytes")
        self.limit = limit


class Held:
    """Each stream's bytes so far, at most `limit` of each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streams = {STDOUT: bytearray(), STDERR: bytearray()}

    def add(self, stream: int, data: bytes) -> None:
        held = self.streams[stream]
        if len(held) + len(data) > self.limit:
            raise OutputOverLimit(self.limit)
        held += data


def run_captured(command: Sequence[str], *, stdin: bytes | None, timeout_s: float | None,
                 env: Mapping[str, str] | None, limit: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """`subprocess.run` with both streams captured and `stdin` as the input (none: /dev/null);
    with `limit`, bounded as `run_bounded` bounds it."""
    import subprocess  # not for the engine's socket, which needs only `Held`

    if limit is not None:
        return run_bounded(command, stdin=stdin, timeout_s=timeout_s, env=env, limit=limit)
    return subprocess.run(command, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, timeout=timeout_s, check=False, env=env)


def run_bounded(command: Sequence[str], *, stdin: bytes | None, timeout_s: float | None,
                env: Mapping[str, str] | None, limit: int) -> subprocess.CompletedProcess[bytes]:
    """Run `command` to its end with `stdin` as its input and both streams captured. The process is
    killed on `OutputOverLimit` and on `subprocess.TimeoutExpired` past `timeout_s`."""
    import subprocess

    process = subprocess.Popen(command, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    held = Held(limit)
    try:
        _exchange(process, stdin or b"", held, deadline, command, timeout_s)
        returncode = process.wait(timeout=_remaining(deadline, command, timeout_s))
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    return subprocess.CompletedProcess(list(command), returncode, bytes(held.streams[STDOUT]),
                                       bytes(held.streams[STDERR]))


def _exchange(process: subprocess.Popen[bytes], data: bytes, held: Held, deadline: float | None,
              command: Sequence[str], timeout_s: float | None) -> None:
    """Feed `data` to the process and read both its streams until it closes them."""
    assert process.stdout is not None and process.stderr is not None
    streams = {process.stdout.fileno(): STDOUT, process.stderr.fileno(): STDERR}
    pending = memoryview(data)
    with selectors.DefaultSelector() as selector:
        for descriptor in streams:
            selector.register(descriptor, selectors.EVENT_READ)
        if process.stdin is not None:
            if pending:
                selector.register(process.stdin.fileno(), selectors.EVENT_WRITE)
            else:
                process.stdin.close()
        while selector.get_map():
            for key, _ in selector.select(_remaining(deadline, command, timeout_s)):
                if key.fd in streams:
                    chunk = os.read(key.fd, _CHUNK)
                    if chunk:
                        held.add(streams[key.fd], chunk)
                    else:
                        selector.unregister(key.fd)
                    continue
                try:  # no more than the pipe takes without blocking, which select promised
                    pending = pending[os.write(key.fd, pending[:select.PIPE_BUF]):]
                except BrokenPipeError:
                    pending = pending[:0]  # the process reads no more of its input
                if not pending:
                    selector.unregister(key.fd)
                    assert process.stdin is not None
                    process.stdin.close()


def _remaining(deadline: float | None, command: Sequence[str], timeout_s: float | None) -> float | None:
    import subprocess

    if deadline is None:
        return None
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise subprocess.TimeoutExpired(list(command), timeout_s or 0)
    return remaining
