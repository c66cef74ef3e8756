"""Plain HTTP reads each reply up to its `Content-Length`, also when the peer keeps the connection open."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from opencode_sandbox import plain_http
from opencode_sandbox.daemon.health import is_serving
from tests.fixtures.listening import AcceptLoop

WAIT_S = 5.0
"""How long a read may block before the test gives up: far longer than any reply here takes."""


@contextmanager
def answered(reply: bytes) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair whose far end has already sent `reply` and stays open."""
    ours, theirs = socket.socketpair()
    ours.settimeout(WAIT_S)
    with ours, theirs:
        theirs.sendall(reply)
        yield ours, theirs


def test_a_reply_with_a_length_ends_there_on_a_connection_left_open() -> None:
    with answered(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"ok\": true}") as (ours, _):
        started = time.monotonic()
        assert plain_http.request(ours, "POST", "docker", "/x") == (200, b'{"ok": true}')
    assert time.monotonic() - started < WAIT_S / 2


def test_a_reply_without_a_body_ends_with_its_head() -> None:
    with answered(b"HTTP/1.1 204 No Content\r\n\r\n") as (ours, _):
        assert plain_http.request(ours, "POST", "docker", "/containers/box/start") == (204, b"")
    with answered(b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n") as (ours, _):
        assert plain_http.request(ours, "HEAD", "docker", "/_ping") == (200, b"")


def test_a_reply_without_a_length_is_read_to_the_close() -> None:
    with answered(b"HTTP/1.0 200 OK\r\n\r\nall of it") as (ours, theirs):
        theirs.shutdown(socket.SHUT_WR)
        assert plain_http.request(ours, "GET", "docker", "/x") == (200, b"all of it")


def test_a_body_cut_short_of_its_length_is_refused() -> None:
    with answered(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{\"cut") as (ours, theirs):
        theirs.shutdown(socket.SHUT_WR)
        with pytest.raises(plain_http.PlainHttpError, match="5 of 20 bytes"):
            plain_http.request(ours, "GET", "docker", "/x")


def test_a_reply_cut_in_its_head_names_the_request() -> None:
    with answered(b"HTTP/1.1 200 OK\r\nContent-") as (ours, theirs):
        theirs.shutdown(socket.SHUT_WR)
        with pytest.raises(plain_http.PlainHttpError, match="not an HTTP response to GET /version"):
            plain_http.request(ours, "GET", "docker", "/version")


@contextmanager
def server_that_keeps_connections_open(reply: bytes) -> Iterator[int]:
    """A local TCP server answering every request with `reply`, closing only when the test ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve(connection: socket.socket) -> None:
        with connection:
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(4096)
            connection.sendall(reply)
            done.wait(WAIT_S * 2)

    loop = AcceptLoop(listener, serve)
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        loop.close()


def test_the_health_check_takes_the_answer_of_a_daemon_that_keeps_the_connection_open() -> None:
    body = b'{"healthy":true,"version":"1.0.0"}'
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with server_that_keeps_connections_open(reply) as port:
        started = time.monotonic()
        assert is_serving(f"http://127.0.0.1:{port}", "secret", timeout_s=WAIT_S)
    assert time.monotonic() - started < WAIT_S / 2
