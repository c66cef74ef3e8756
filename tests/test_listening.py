"""No test server leaves a thread waiting in `accept` on its closed socket (`tests/fixtures/listening.py`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import listening
from tests.fixtures.engine_relay import holding_relay
from tests.fixtures.scripted_engine import ScriptedEngine


@pytest.fixture
def server(tmp_path: Path) -> Iterator[socket.socket]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)
    yield listener
    listener.close()


def waiting_in_accept(thread: threading.Thread) -> None:
    deadline = time.monotonic() + 5
    while "accept" not in repr(listening.sys._current_frames().get(thread.ident or 0)):
        assert time.monotonic() < deadline, "the thread never reached accept"
        time.sleep(0.01)


def test_a_thread_waiting_on_a_socket_closed_without_shutdown_is_found(server: socket.socket) -> None:
    thread = threading.Thread(target=lambda: server.accept(), name="left-behind", daemon=True)
    thread.start()
    waiting_in_accept(thread)
    path = server.getsockname()
    assert thread.ident not in listening.waiting_on_closed_sockets(), "an open socket's thread is not left"

    server.close()

    try:
        assert listening.left_waiting(set(), grace_s=0.2) == {thread.ident: "left-behind"}
        assert listening.left_waiting({thread.ident or 0}, grace_s=0) == {}, "one already reported is not again"
    finally:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)  # the old socket still answers its path: its thread takes this and ends
        thread.join(5)


def test_an_accept_loop_ends_its_thread_when_closed(server: socket.socket) -> None:
    served: list[bytes] = []
    loop = listening.AcceptLoop(server, lambda connection: served.append(connection.recv(5)))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(server.getsockname())
            client.sendall(b"hello")
        deadline = time.monotonic() + 5
        while not served and time.monotonic() < deadline:
            time.sleep(0.01)
        assert served == [b"hello"]
    finally:
        loop.close()

    assert not loop._thread.is_alive()
    assert listening.waiting_on_closed_sockets() == {}


def test_the_holding_relay_leaves_no_thread_behind(tmp_path: Path) -> None:
    before = set(listening.waiting_on_closed_sockets())
    with holding_relay(tmp_path, "never", tmp_path / "held"):
        time.sleep(0.05)
    assert listening.left_waiting(before, grace_s=0.5) == {}


def test_the_scripted_engine_leaves_no_thread_behind(tmp_path: Path) -> None:
    before = set(listening.waiting_on_closed_sockets())
    ScriptedEngine(tmp_path / "e.sock", lambda *_: None).close()
    assert listening.left_waiting(before, grace_s=0.5) == {}
