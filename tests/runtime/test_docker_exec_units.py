"""The exec protocol on bytes: the frame demultiplexer, the HTTP head reader and a scripted engine."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from opencode_sandbox import plain_http
from opencode_sandbox.engine.socket_client import ApiUnavailable, DockerApi
from opencode_sandbox.runtime.docker import execution as docker_exec
from opencode_sandbox.runtime.docker.execution import STDERR, STDOUT, ExecRequest, FrameDemux
from opencode_sandbox.runtime.types import EXEC_OUTPUT_LIMIT
from tests.fixtures.scripted_engine import Handler, ScriptedEngine, engine_at, json_answer

__all__ = ["engine_at"]  # a fixture, used by name


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def collect(demux: FrameDemux, *chunks: bytes) -> dict[int, bytes]:
    out = {STDOUT: b"", STDERR: b""}
    for chunk in chunks:
        for stream, piece in demux.feed(chunk):
            out[stream] += piece
    return out


def test_frames_go_to_their_streams() -> None:
    data = frame(1, b"out one\n") + frame(2, b"err\n") + frame(1, b"out two\n")
    assert collect(FrameDemux(), data) == {STDOUT: b"out one\nout two\n", STDERR: b"err\n"}


def test_every_split_point_gives_the_same_streams() -> None:
    data = frame(1, b"alpha") + frame(2, b"") + frame(2, b"beta gamma") + frame(1, bytes(range(256)))
    expected = {STDOUT: b"alpha" + bytes(range(256)), STDERR: b"beta gamma"}
    for cut in range(len(data) + 1):
        assert collect(FrameDemux(), data[:cut], data[cut:]) == expected, cut
    assert collect(FrameDemux(), *(data[i : i + 1] for i in range(len(data)))) == expected


def test_payload_is_passed_on_before_its_frame_is_complete() -> None:
    demux = FrameDemux()
    whole = frame(2, b"0123456789")
    assert demux.feed(whole[:13]) == [(STDERR, b"01234")]
    assert demux.feed(whole[13:] + frame(1, b"x")) == [(STDERR, b"56789"), (STDOUT, b"x")]


def test_length_is_big_endian_over_four_bytes() -> None:
    payload = b"a" * 65536 + b"b" * 3
    data = bytes([2, 0, 0, 0, 0, 1, 0, 3]) + payload + frame(1, b"after")
    assert collect(FrameDemux(), data) == {STDOUT: b"after", STDERR: payload}


def test_stdin_echo_goes_to_stdout_and_engine_errors_to_stderr() -> None:
    assert collect(FrameDemux(), frame(0, b"echo"), frame(3, b"engine says no")) == {
        STDOUT: b"echo",
        STDERR: b"engine says no",
    }


def test_exec_document() -> None:
    request = ExecRequest("box", ["sh", "-c", "echo $A"], "root", "/tmp", {"A": "1 2", "B": "x=y"}, stdin=True)
    assert request.document() == {
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
        "Cmd": ["sh", "-c", "echo $A"],
        "User": "root",
        "WorkingDir": "/tmp",
        "Env": ["A=1 2", "B=x=y"],
    }
    assert ExecRequest("box", ["true"], "dev", "/workspace").document()["AttachStdin"] is False


def test_read_head_keeps_the_bytes_after_it() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"HTTP/1.1 101 UPGRADED\r\nUpgrade: tcp\r\nContent-Type: x\r\n\r\n" + frame(1, b"hi"))
        status, headers, rest = plain_http.read_head(ours)
    assert status == 101
    assert headers == {"upgrade": "tcp", "content-type": "x"}
    assert rest == frame(1, b"hi")


def test_read_head_refuses_a_cut_answer() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-")
        theirs.close()
        with pytest.raises(plain_http.PlainHttpError):
            plain_http.read_head(ours)


def test_read_body_stops_at_content_length_on_a_connection_left_open() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b'ssage":"no"}')
        body = plain_http.read_body(ours, {"content-length": "16"}, b'{"me')
    assert body == b'{"message":"no"}'


def exec_engine(start_head: bytes, exit_code: int) -> Handler:
    def handler(method: str, target: str, headers: dict[str, str], body: bytes, connection: socket.socket) -> None:
        if target == "/containers/box/exec":
            connection.sendall(json_answer("201 Created", {"Id": "e1"}))
        elif target == "/exec/e1/start":
            connection.sendall(start_head + frame(1, b"out "))
            connection.sendall(frame(2, b"err") + frame(1, b"more"))
            # Take the process's stdin to its end, as the engine does: closing with it unread would
            # reset the connection under the client's read.
            while connection.recv(65536):
                pass
        elif target == "/exec/e1/json":
            connection.sendall(json_answer("200 OK", {"Running": False, "ExitCode": exit_code}))

    return handler


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n",
    ],
    ids=["upgraded", "older-engine"],
)
def test_captured_exec_against_a_scripted_engine(
    engine_at: Callable[[Handler], ScriptedEngine], head: bytes
) -> None:
    engine = engine_at(exec_engine(head, 7))
    request = ExecRequest("box", ["run", "it"], "dev", "/workspace", {"K": "V"}, stdin=True)
    captured = docker_exec.run_captured(DockerApi(engine.path), request, b"input", 10, EXEC_OUTPUT_LIMIT)
    assert (captured.exit_code, captured.stdout, captured.stderr) == (7, b"out more", b"err")
    (_, create, _, create_body), (_, start, start_headers, start_body), (_, inspect, _, _) = engine.requests
    assert (create, start, inspect) == ("/containers/box/exec", "/exec/e1/start", "/exec/e1/json")
    assert json.loads(create_body)["Env"] == ["K=V"]
    assert json.loads(start_body) == {"Detach": False, "Tty": False}
    assert start_headers["connection"] == "Upgrade" and start_headers["upgrade"] == "tcp"


def test_exit_code_waits_while_the_engine_still_reports_running(
    engine_at: Callable[[Handler], ScriptedEngine],
) -> None:
    answers = iter([{"Running": True, "ExitCode": None}, {"Running": True, "ExitCode": 0}])

    def handler(method: str, target: str, headers: dict[str, str], body: bytes, connection: socket.socket) -> None:
        document = next(answers, {"Running": False, "ExitCode": 4})
        connection.sendall(json_answer("200 OK", document))

    engine = engine_at(handler)
    assert docker_exec.exit_code(DockerApi(engine.path), "e1") == 4
    assert len(engine.requests) == 3


def test_refusals_carry_the_engine_message(engine_at: Callable[[Handler], ScriptedEngine]) -> None:
    def handler(method: str, target: str, headers: dict[str, str], body: bytes, connection: socket.socket) -> None:
        if target.endswith("/exec"):
            connection.sendall(json_answer("201 Created", {"Id": "e1"}))
        else:
            # Left open, as an engine keeping the connection alive would: the body length must end the read.
            connection.sendall(json_answer("409 Conflict", {"message": "Container box is not running"}, close=False))
            connection.recv(1)

    engine = engine_at(handler)
    with pytest.raises(docker_exec.EngineRefused) as refused:
        docker_exec.run_captured(DockerApi(engine.path, timeout_s=5), ExecRequest("box", ["x"], "dev", "/"), None, 5,
                                 EXEC_OUTPUT_LIMIT)
    assert (refused.value.status, refused.value.message) == (409, "Container box is not running")


def test_a_socket_nobody_listens_on_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    with dead, pytest.raises(ApiUnavailable):
        docker_exec.create(DockerApi(str(path)), ExecRequest("box", ["true"], "dev", "/"))


def test_timeout_while_the_stream_stays_silent(engine_at: Callable[[Handler], ScriptedEngine]) -> None:
    release = threading.Event()

    def handler(method: str, target: str, headers: dict[str, str], body: bytes, connection: socket.socket) -> None:
        if target.endswith("/exec"):
            connection.sendall(json_answer("201 Created", {"Id": "e1"}))
        else:
            connection.sendall(b"HTTP/1.1 101 UPGRADED\r\n\r\n" + frame(1, b"partial"))
            release.wait(10)

    engine = engine_at(handler)
    try:
        with pytest.raises(TimeoutError):
            docker_exec.run_captured(DockerApi(engine.path), ExecRequest("box", ["x"], "dev", "/"), None, 0.3,
                                     EXEC_OUTPUT_LIMIT)
    finally:
        release.set()


@pytest.mark.parametrize(
    ("stdin", "prelude", "expected"),
    [
        (subprocess.DEVNULL, "", "True"),
        (None, "import os; os.close(0)\n", "True"),
        (subprocess.PIPE, "", "False"),
        ("file", "", "False"),
    ],
    ids=["devnull", "closed", "pipe", "file"],
)
def test_only_a_null_or_closed_stdin_counts_as_no_input(
    tmp_path: Path, stdin: object, prelude: str, expected: str
) -> None:
    source = tmp_path / "input"
    source.write_text("data")
    with source.open("rb") as file:
        result = subprocess.run(
            [sys.executable, "-c", prelude + "from opencode_sandbox.runtime.docker.execution import stdin_is_null\n"
             "print(stdin_is_null())"],
            stdin=file if stdin == "file" else stdin, capture_output=True, text=True, check=True, timeout=60,
        )
    assert result.stdout.strip() == expected
