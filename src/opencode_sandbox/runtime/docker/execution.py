"""Processes in containers through the Docker Engine API socket, without the `docker` command.

An exec is three requests: create it, start it on a connection the engine hijacks for the
process's streams, then ask for its exit code. Without a TTY the engine multiplexes stdout
and stderr on that connection in frames: an 8-byte header (byte 0 the stream, bytes 4..7
the big-endian payload length) then the payload. Writing on the connection feeds the
process's stdin; closing our writing half closes it.

Every failure before the start request goes out raises `ApiUnavailable`: nothing ran, and
the caller may still use the `docker` command. Later failures cannot be retried that way.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from urllib.parse import quote

from opencode_sandbox import TYPE_CHECKING, plain_http
from opencode_sandbox.bounded_output import STDERR, STDOUT, Held
from opencode_sandbox.core.records import Record
from opencode_sandbox.engine.socket_client import ApiUnavailable, DockerApi, error_message

if TYPE_CHECKING:
    from typing import Any

CONTAINER_START_TIMEOUT_S = 120.0
EXIT_WAIT_S = 5.0
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports an interrupted command
OUTPUT_CLOSED_EXIT = 141  # 128 + SIGPIPE, as for a writer whose reader went away
_HEADER_SIZE = 8
_CHUNK = 65536

Sink = Callable[[int, bytes], None]


class EngineRefused(Exception):
    """The engine answered with an error status; `message` is its own explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message or f"HTTP {status}")
        self.status = status
        self.message = message or f"HTTP {status}"


class EngineLost(Exception):
    """The connection failed after the process may have started: no fallback is safe."""


class OutputClosed(Exception):
    """Our own standard output or error was closed by its reader."""


class ExecRequest(Record):
    container: str
    argv: Sequence[str]
    user: str
    workdir: str
    env: Mapping[str, str] | None = None
    stdin: bool = False

    def document(self) -> dict[str, Any]:
        return {
            "AttachStdin": self.stdin,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
            "Cmd": list(self.argv),
            "User": self.user,
            "WorkingDir": self.workdir,
            "Env": [f"{key}={value}" for key, value in (self.env or {}).items()],
        }


class Captured(Record):
    exit_code: int
    stdout: bytes
    stderr: bytes


class FrameDemux:
    """Splits the multiplexed stream into (stream, bytes) pieces, passing payloads on as they arrive."""

    def __init__(self) -> None:
        self._header = b""
        self._stream = STDOUT
        self._remaining = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        pieces: list[tuple[int, bytes]] = []
        position = 0
        while position < len(data):
            if self._remaining == 0:
                position = self._take_header(data, position)
                continue
            piece = data[position : position + self._remaining]
            position += len(piece)
            self._remaining -= len(piece)
            pieces.append((self._stream, piece))
        return pieces

    def _take_header(self, data: bytes, position: int) -> int:
        end = position + _HEADER_SIZE - len(self._header)
        self._header += data[position:end]
        if len(self._header) == _HEADER_SIZE:
            # Stream 0 (stdin echoed back) goes with stdout, 3 (the engine's own errors) with stderr.
            self._stream = STDERR if self._header[0] in (2, 3) else STDOUT
            self._remaining = int.from_bytes(self._header[4:8], "big")
            self._header = b""
        return min(end, len(data))


def create(api: DockerApi, request: ExecRequest) -> str:
    """The new exec's id; `EngineRefused` with 404 for a missing container, 409 for one not running."""
    status, document = api.post_json(f"/containers/{_quoted(request.container)}/exec", request.document())
    if status != 201:
        raise EngineRefused(status, error_message(document))
    if not isinstance(document, dict) or not isinstance(document.get("Id"), str):
        raise ApiUnavailable("the engine's answer to an exec creation has no Id")
    return str(document["Id"])


def open_stream(api: DockerApi, exec_id: str) -> tuple[socket.socket, bytes]:
    """Start the exec; the hijacked connection and the stream bytes that came with the answer's head."""
    connection = api.connect()
    try:
        plain_http.send(
            connection,
            "POST",
            "docker",
            f"/exec/{exec_id}/start",
            body=b'{"Detach":false,"Tty":false}',
            headers={"Content-Type": "application/json", "Connection": "Upgrade", "Upgrade": "tcp"},
            version="HTTP/1.1",
        )
        status, headers, rest = plain_http.read_head(connection)
        if status not in (101, 200):
            raise EngineRefused(status, _error_body(connection, headers, rest))
    except OSError as error:
        connection.close()
        raise EngineLost(str(error)) from None
    except EngineRefused:
        connection.close()
        raise
    return connection, rest


def exit_code(api: DockerApi, exec_id: str, wait_s: float = EXIT_WAIT_S) -> int:
    """The exec's exit code, waiting a little for the engine to record it after the stream ended."""
    deadline = time.monotonic() + wait_s
    delay = 0.001
    while True:
        try:
            status, document = api.get_json(f"/exec/{exec_id}/json")
        except ApiUnavailable as error:
            raise EngineLost(str(error)) from None
        if status != 200 or not isinstance(document, dict):
            raise EngineRefused(status, error_message(document))
        code = document.get("ExitCode")
        finished = not document.get("Running") and isinstance(code, int)
        if finished or time.monotonic() >= deadline:
            # Like `docker exec`: a process still running past the wait counts as 0.
            return code if isinstance(code, int) else 0
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def attach(api: DockerApi, request: ExecRequest) -> int:
    """Run on our own fds 0, 1 and 2, streaming; the exit code, 130 on Ctrl-C, 141 when our output closes."""
    reserve_standard_fds()
    with sigint_handled_by(signal.default_int_handler):  # Ctrl-C raises KeyboardInterrupt here
        try:
            exec_id = create(api, request)
            connection, rest = open_stream(api, exec_id)
            with closing(connection):
                connection.settimeout(None)
                if request.stdin:
                    spawn(copy_stdin, connection)
                pump(connection, rest, write_to_fd)
            return exit_code(api, exec_id)
        except KeyboardInterrupt:
            return INTERRUPTED_EXIT
        except OutputClosed:
            return OUTPUT_CLOSED_EXIT


def run_captured(api: DockerApi, request: ExecRequest, stdin: bytes | None, timeout_s: float | None,
                 output_limit: int) -> Captured:
    """Run to the end and collect both streams; `TimeoutError` past `timeout_s`, `OutputOverLimit`
    once a stream passes `output_limit` bytes (the connection is closed then, and the rest unread)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    exec_id = create(api, request)
    connection, rest = open_stream(api, exec_id)
    held = Held(output_limit)
    with closing(connection):
        connection.settimeout(None)
        if request.stdin:
            spawn(_send_input, connection, stdin or b"")
        pump(connection, rest, held.add, deadline)
    return Captured(exit_code(api, exec_id), bytes(held.streams[STDOUT]), bytes(held.streams[STDERR]))


def start_container(api: DockerApi, name: str) -> None:
    """Start a container; one already running is fine. `EngineRefused` with the engine's reason."""
    status, document = api.post_json(f"/containers/{_quoted(name)}/start", timeout_s=CONTAINER_START_TIMEOUT_S)
    if status not in (204, 304):
        raise EngineRefused(status, error_message(document))


def pump(connection: socket.socket, received: bytes, sink: Sink, deadline: float | None = None) -> None:
    """Hand every payload piece to `sink` until the engine closes the stream."""
    demux = FrameDemux()
    data = received
    while True:
        for stream, piece in demux.feed(data):
            sink(stream, piece)
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the process did not finish in time")
            connection.settimeout(remaining)
        try:
            data = connection.recv(_CHUNK)
        except TimeoutError:
            raise
        except OSError as error:
            raise EngineLost(str(error)) from None
        if not data:
            return


def write_to_fd(stream: int, data: bytes) -> None:
    """Write all of `data` to our fd 1 or 2 (the stream numbers are the fds), unbuffered."""
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(stream, view) :]
            except BlockingIOError:  # an fd shared with a parent that made it non-blocking
                select.select([], [stream], [])
    except BrokenPipeError:
        raise OutputClosed() from None


def stdin_is_null() -> bool:
    """Whether our standard input is /dev/null (or closed): nothing to forward, the process reads EOF either way."""
    try:
        ours = os.fstat(0)
    except OSError:
        return True
    null = os.stat(os.devnull)
    return (ours.st_mode, ours.st_rdev) == (null.st_mode, null.st_rdev)


def reserve_standard_fds() -> None:
    """Point closed fds 0, 1 and 2 at /dev/null: a socket opened later must not take one of their numbers."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            spare = os.open(os.devnull, os.O_RDWR)
            if spare != fd:
                os.dup2(spare, fd)
                os.close(spare)


def copy_stdin(connection: socket.socket) -> None:
    try:
        while chunk := _read_stdin():
            connection.sendall(chunk)
    except OSError:
        pass  # a closed or unreadable stdin ends the input like EOF; a closed connection ends it too
    end_input(connection)


def _read_stdin() -> bytes:
    while True:
        try:
            return os.read(0, _CHUNK)
        except BlockingIOError:
            select.select([0], [], [])


def _send_input(connection: socket.socket, data: bytes) -> None:
    try:
        connection.sendall(data)
    except OSError:
        return
    end_input(connection)


def end_input(connection: socket.socket) -> None:
    with suppress(OSError):
        connection.shutdown(socket.SHUT_WR)


def spawn(target: Callable[..., None], *args: Any) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


@contextmanager
def closing(connection: socket.socket) -> Iterator[None]:
    """Close the connection afterwards; shutting it down first wakes a stdin thread blocked on it."""
    try:
        yield
    finally:
        with suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
        connection.close()


@contextmanager
def sigint_handled_by(handler: Callable[..., Any] | int) -> Iterator[None]:
    """Ctrl-C goes to `handler` inside the block, whatever the caller had installed
    (only the main thread can set it; elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _error_body(connection: socket.socket, headers: Mapping[str, str], received: bytes) -> str:
    try:
        document = json.loads(plain_http.read_body(connection, headers, received) or b"null")
    except ValueError:
        return ""
    return error_message(document)


def _quoted(name: str) -> str:
    return quote(name, safe="")
