"""A command made ready in a running container while the launcher still checks, run only when it says so.

Most of a warm `shell -- CMD` is the engine making the process: the runtime joins the container's
namespaces and cgroup, and that takes as long as the rest of the launcher's start. A gated exec
pays it while the launcher checks. Its process is a shell, the gate, that reads one line from its
input and starts nothing else until then. The launcher sends a token it drew for this exec once
the start has kept the VM as it found it; the gate checks the line against the token's SHA-256
digest, writes `MARK` on its output and replaces itself with the command, which then has the
same process, user, directory, environment and streams as under `docker exec`.

Only the launcher knows the token: the gate's arguments hold its digest, which anything in the
VM can read and none can turn back into the token, so a process of the VM that writes to the
gate's input (through `/proc/PID/fd/0`, as the same user can) cannot start the command early.
A VM can still replace its own `sh`, as it can replace any program the launcher starts in it:
the gate keeps nothing from the VM that it could not do anyway, and the command only ever runs
in the VM.

Anything else (a wrong line, no line, a VM without `sh` or `sha256sum`, a command the VM cannot
find) ends the gate without the command and without the mark; the launcher then runs the command
as `docker exec` would, with the engine's own errors. The user's input goes to the command only
once the mark arrived, so a refused gate took none of it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence

from opencode_sandbox.bounded_output import STDOUT
from opencode_sandbox.core.digest import sha256
from opencode_sandbox.engine.socket_client import DockerApi
from opencode_sandbox.runtime.docker.execution import (
    INTERRUPTED_EXIT,
    OUTPUT_CLOSED_EXIT,
    ExecRequest,
    OutputClosed,
    closing,
    copy_stdin,
    create,
    end_input,
    exit_code,
    open_stream,
    pump,
    reserve_standard_fds,
    sigint_handled_by,
    spawn,
    stdin_is_null,
    write_to_fd,
)

MARK = b"opencode-sandbox: the gate opened\n"
"""What the gate writes on its output just before it becomes the command; never passed on."""

# Run by `sh -c GATE DIGEST COMMAND...`: $0 is the digest, "$@" the command. Its own errors go
# nowhere until it is the command, whose standard error is the exec's again.
GATE = (
    "exec 3>&2 2>/dev/null; "
    "IFS= read -r token || exit 97; "
    '[ "$(printf %s "$token" | sha256sum)" = "$0  -" ] || exit 97; '
    'command -v -- "$1" >/dev/null || exit 97; '
    "unset PWD; "
    f"echo '{MARK.decode().rstrip()}'; "
    'exec 2>&3 3>&-; exec "$@"'
)


def gate_argv(digest: str, argv: Sequence[str]) -> list[str]:
    return ["/bin/sh", "-c", GATE, digest, *argv]


class GatedExec:
    """One gated exec in a running container: `run` opens the gate, `end` closes it unopened."""

    def __init__(self, api: DockerApi, request: ExecRequest, fallback: Callable[[], int]) -> None:
        """Make the gate's process now. `EngineRefused` (a container missing or not running),
        `ApiUnavailable` or `EngineLost` when it cannot be made; `fallback` runs the command
        without a gate, for a gate that refuses."""
        reserve_standard_fds()  # before the connection is opened: it must not take fd 0, 1 or 2
        self._api = api
        self._fallback = fallback
        self._token = os.urandom(16).hex()
        gated = request._replace(argv=gate_argv(sha256(self._token.encode()).hexdigest(), request.argv), stdin=True)
        self._exec_id = create(api, gated)
        self._connection, self._received = open_stream(api, self._exec_id)
        self._ended = False

    def run(self) -> int:
        """Open the gate and stream the command on our fds 0, 1 and 2, as `execution.attach` does;
        the exit code, 130 on Ctrl-C, 141 when our output closes."""
        if self._ended:
            raise RuntimeError("the gate was ended")
        self._ended = True
        with sigint_handled_by(signal.default_int_handler):
            try:
                opened = self._open_gate()
                return exit_code(self._api, self._exec_id) if opened else self._fallback()
            except KeyboardInterrupt:
                return INTERRUPTED_EXIT
            except OutputClosed:
                return OUTPUT_CLOSED_EXIT

    def end(self) -> None:
        """Close the gate unopened: its process reads the end of its input and exits, the command unrun."""
        if not self._ended:
            self._ended = True
            with closing(self._connection):
                pass

    def _open_gate(self) -> bool:
        """Whether the command started; the stream is read to its end either way."""
        connection = self._connection

        def forward_input() -> None:
            if stdin_is_null():
                end_input(connection)
            else:
                spawn(copy_stdin, connection)

        gate = _Gate(write_to_fd, forward_input)
        with closing(connection):
            connection.settimeout(None)
            try:
                connection.sendall(self._token.encode() + b"\n")
            except OSError:
                return False  # the gate's process is gone: nothing started
            pump(connection, self._received, gate.take)
        return gate.opened


class _Gate:
    """The exec's stream: nothing passes until `MARK` began its output, then everything after it."""

    def __init__(self, sink: Callable[[int, bytes], None], on_open: Callable[[], None]) -> None:
        self._sink = sink
        self._on_open = on_open
        self._seen = b""
        self.opened = False
        self._refused = False

    def take(self, stream: int, piece: bytes) -> None:
        if self.opened:
            self._sink(stream, piece)
            return
        if self._refused or stream != STDOUT:
            return  # the gate's own output, or what came after it refused: the command did not run
        self._seen += piece
        if not (self._seen.startswith(MARK) or MARK.startswith(self._seen)):
            self._refused = True
        elif len(self._seen) >= len(MARK):
            self.opened = True
            self._on_open()
            if rest := self._seen[len(MARK):]:
                self._sink(STDOUT, rest)

