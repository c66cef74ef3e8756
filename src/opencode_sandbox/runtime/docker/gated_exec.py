"""A command made ready in a running container while the launcher still checks, run only when it says so.

Most of a warm `shell -- CMD` is the engine making the process: the runtime joins the container's
namespaces and cgroup, and that takes as long as the rest of the launcher's start. A gated exec
pays it while the launcher checks. Its process is a shell, the gate, that knows nothing of the
command: it reads a line (the token) and writes it back, reads a second line (the command, each
word quoted for the shell), writes `MARK` and replaces itself with the command, which then has the
same process, user, directory, environment and streams as under `docker exec`.

The launcher draws the token for this exec, and writes it only once the start kept the VM as it
found it; it writes the command only when the first line the gate's output brings is that token.
A process of the VM running as the gate's user can reach the gate (its input and output through
`/proc/PID/fd`, its memory through `/proc/PID/mem`), but before the token nothing tells it the
command, and it cannot write the token back before the launcher sent it: whatever it does, the
user's command reaches the VM no earlier than the launcher's word, and a gate the launcher ended
never learns it. What the VM can do with a gate it reached is run commands of its own as the
gate's user, which it can anyway, or change what the launcher reports of the command, as it can
for any process of that user.

A gate that answers otherwise (another line first, an end without one, a VM without `sh`) gets no
command, and the launcher runs the command as `docker exec` would; so does a gate that ends without
the mark with the code `REFUSED` (a first word that is no program the engine could start), with
the engine's own errors. The user's input goes to the command only after the mark, so a refused
gate took none of it. (A process of the gate's user that takes the mark off the gate's output after
the launcher's word can so have the command run twice: it has the command then, and could run it
itself.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from opencode_sandbox.bounded_output import STDERR, STDOUT
from opencode_sandbox.engine.socket_client import DockerApi
from opencode_sandbox.runtime.docker.execution import (
    INTERRUPTED_EXIT,
    OUTPUT_CLOSED_EXIT,
    EngineLost,
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
REFUSED = 97
"""The gate's exit when it ends without the command."""
_HELD = 65536
"""The most of the gate's output kept while the launcher waits for a line or the mark."""
_EARLY_ERRORS = 1 << 20
"""The most of the command's standard error kept while its mark is still on the way."""

# Run by `sh -c GATE`: builtins only, so no program of the VM's runs before the command. Its own
# errors go nowhere until it is the command, whose standard error is the exec's again.
GATE = (
    "exec 3>&2 2>/dev/null; "
    f"IFS= read -r opencode_sandbox_gate || exit {REFUSED}; "
    "printf '%s\\n' \"$opencode_sandbox_gate\"; "
    f"IFS= read -r opencode_sandbox_gate || exit {REFUSED}; "
    f'eval "set -- $opencode_sandbox_gate" || exit {REFUSED}; '
    # A program the engine could start, found on PATH as the engine and `exec` find it (a builtin
    # of the gate's shell is no program; a PATH with a folder that is not absolute, where the two
    # may differ, is left to the engine too), or the engine runs it and says what is wrong.
    'case $1 in */*) opencode_sandbox_gate=$1;; *) opencode_sandbox_gate=; set -f; IFS=:; '
    f'for opencode_sandbox_dir in $PATH; do case $opencode_sandbox_dir in /*) ;; *) exit {REFUSED};; esac; '
    '[ -f "$opencode_sandbox_dir/$1" ] && [ -x "$opencode_sandbox_dir/$1" ] '
    '&& { opencode_sandbox_gate=$opencode_sandbox_dir/$1; break; }; done; unset IFS; set +f;; esac; '
    f'[ -f "$opencode_sandbox_gate" ] && [ -x "$opencode_sandbox_gate" ] || exit {REFUSED}; '
    "unset PWD opencode_sandbox_gate opencode_sandbox_dir; "
    f"echo '{MARK.decode().rstrip()}'; "
    'exec 2>&3 3>&-; exec "$@"'
)


def can_gate(argv: Sequence[str]) -> bool:
    """Whether the gate can take `argv` on one line: UTF-8 words without a line break."""
    try:
        "".join(argv).encode()
    except UnicodeError:  # a word of bytes that are not UTF-8, kept as surrogates
        return False
    return bool(argv) and not any("\n" in word for word in argv)


class GatedExec:
    """One gated exec in a running container: `run` opens the gate, `end` closes it unopened."""

    def __init__(self, api: DockerApi, request: ExecRequest, fallback: Callable[[], int],
                 failures: Callable[[], AbstractContextManager[None]]) -> None:
        """Make the gate's process now (`request.argv`: words `can_gate` takes). `EngineRefused` (a
        container missing or not running), `ApiUnavailable` or `EngineLost` when it cannot be made;
        `fallback` runs the command without a gate, for a gate that refuses; `failures` turns the
        engine's failures while the command runs into the runtime's errors, as for any exec."""
        import shlex

        reserve_standard_fds()  # before the connection is opened: it must not take fd 0, 1 or 2
        self._api = api
        self._fallback = fallback
        self._failures = failures
        self._token = os.urandom(16).hex().encode()
        self._command_line = shlex.join(request.argv).encode()
        self._exec_id = create(api, request._replace(argv=["/bin/sh", "-c", GATE], stdin=True))
        self._connection, self._received = open_stream(api, self._exec_id)
        self._ended = False
        self.opened: bool | None = None
        """After `run`: whether the gate took the command (False: it ran the plain way)."""

    def run(self) -> int:
        """Open the gate and stream the command on our fds 0, 1 and 2, as `execution.attach` does;
        the exit code, 130 on Ctrl-C, 141 when our output closes."""
        if self._ended:
            raise RuntimeError("the gate was ended")
        self._ended = True
        with sigint_handled_by(signal.default_int_handler):
            try:
                with self._failures():
                    code = self._open_gate()
                self.opened = code is not None
                return code if code is not None else self._fallback()
            except KeyboardInterrupt:
                return INTERRUPTED_EXIT
            except OutputClosed:
                return OUTPUT_CLOSED_EXIT

    def end(self) -> None:
        """Close the gate unopened: it reads the end of its input and exits, never told the command."""
        if not self._ended:
            self._ended = True
            with closing(self._connection):
                pass

    def _open_gate(self) -> int | None:
        """The command's exit code, its stream read to the end; None when the gate did not take it."""
        connection = self._connection

        def send_command() -> None:
            connection.sendall(self._command_line + b"\n")

        def forward_input() -> None:
            if stdin_is_null():
                end_input(connection)
            else:
                spawn(copy_stdin, connection)

        gate = _Gate(self._token, send_command, forward_input, write_to_fd)
        with closing(connection):
            connection.settimeout(None)
            try:
                connection.sendall(self._token + b"\n")
                pump(connection, self._received, gate.take)
            except _Refused:
                return None  # closing the connection ends the gate: it never had the command
            except (OSError, EngineLost):
                if not gate.sent:
                    return None  # the gate's process is gone before it had the command
                raise
        if not gate.sent:
            return None
        code = exit_code(self._api, self._exec_id)
        return None if code == REFUSED and not gate.opened else code  # refused before the mark: not started


class _Refused(Exception):
    """The gate's first line was not the token."""


class _Gate:
    """The gate's stream: its first line must be the token, then nothing passes until the mark, and
    everything after it does. The engine keeps no order between the two streams, so what the
    command writes on its standard error can come before the mark it wrote on its output earlier:
    that is held once the command is sent (the gate's own errors go nowhere) and passed on with the
    mark, or dropped when the gate refuses and the command runs the plain way."""

    def __init__(self, token: bytes, send_command: Callable[[], None], on_open: Callable[[], None],
                 sink: Callable[[int, bytes], None]) -> None:
        self._token = token
        self._send_command = send_command
        self._on_open = on_open
        self._sink = sink
        self._held = b""
        self._early_errors = b""
        self.sent = False
        self.opened = False

    def take(self, stream: int, piece: bytes) -> None:
        if self.opened:
            self._sink(stream, piece)
            return
        if stream != STDOUT:
            if self.sent:  # before the command is sent, anything there is another process's
                self._early_errors += piece[:_EARLY_ERRORS - len(self._early_errors)]
            return
        self._held += piece
        if not self.sent:
            line, newline, rest = self._held.partition(b"\n")
            if not newline:
                if len(self._held) > len(self._token):
                    raise _Refused
                return
            if line != self._token:
                raise _Refused
            self.sent = True
            self._send_command()
            self._held = rest
        at = self._held.find(MARK)
        if at < 0:
            self._held = self._held[-_HELD:]
            return
        self.opened = True
        self._on_open()
        if self._early_errors:
            self._sink(STDERR, self._early_errors)
        if rest := self._held[at + len(MARK):]:
            self._sink(STDOUT, rest)
        self._held = self._early_errors = b""
