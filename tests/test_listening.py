"""No test server leaves a thread waiting in `accept` on its closed socket (`tests/fixtures/listening.py`)."""

from __future__ import annotations

import socket
import subprocess
import sys
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


_FOUND_WHEN_LEFT = """
import socket, tempfile, threading, time
from tests.fixtures import listening
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(tempfile.mkdtemp() + "/s.sock")
server.listen(1)
thread = threading.Thread(target=server.accept, name="left-behind", daemon=True)
thread.start()
while "accept" not in repr(listening.sys._current_frames().get(thread.ident)):
    time.sleep(0.01)
print(listening.waiting_on_closed_sockets())
server.close()
print(listening.left_waiting(set(), grace_s=0.2) == {thread.ident: "left-behind"})
print(listening.left_waiting({thread.ident}, grace_s=0))
"""


def test_a_thread_waiting_on_a_socket_closed_without_shutdown_is_found() -> None:
    """In a process of its own: in the suite's, a child's SIGCHLD may end the left thread first."""
    ran = subprocess.run([sys.executable, "-c", _FOUND_WHEN_LEFT], capture_output=True, text=True, timeout=30,
                         cwd=Path(__file__).parents[1], check=True)
    assert ran.stdout.splitlines() == ["{}", "True", "{}"], ran.stderr


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


_LEFT_THREAD_TAKES_A_LATER_CONNECTION = """
import signal, socket, subprocess, sys, tempfile, threading, time
folder = tempfile.mkdtemp()
old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
old.bind(folder + "/old")
old.listen(1)
taken = []
def serve():
    try:
        old.accept()
        taken.append("a connection of the later socket")
    except OSError:
        pass
threading.Thread(target=serve, daemon=True).start()
time.sleep(0.2)
old.close()  # without shutdown: the thread keeps waiting
later = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
later.bind(folder + "/later")
later.listen(1)
child = subprocess.Popen(["true"])
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # as subprocess does around vfork
time.sleep(0.3)  # the child ends in here
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
child.wait()
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
    client.connect(folder + "/later")
time.sleep(0.3)
print(taken)
"""


def test_why_the_thread_must_end_a_left_one_takes_a_later_sockets_connection() -> None:
    """The hazard itself, in a process of its own: a child's SIGCHLD while its parent thread blocks
    it restarts the left thread's `accept` on the later socket with the same number."""
    ran = subprocess.run([sys.executable, "-c", _LEFT_THREAD_TAKES_A_LATER_CONNECTION],
                         capture_output=True, text=True, timeout=30, check=True)
    assert ran.stdout.strip() == "['a connection of the later socket']", ran.stderr
