"""A start or a detach asks the project's idle reaper to look at what changed before it reads the
checkout, instead of walking it: the reaper knows from the kernel's file events what changed since
its last look, so the answer costs the same on 200,000 files as on one.

The reaper answers on an abstract unix socket named after the user, the state folder and the
project (no file, so no path length limit and nothing left behind), and only to a process of its
own user; the asking side checks the same of the answering one (`SO_PEERCRED`), so another user's
process can neither ask nor answer in its place. The answer is `clean STAMP` once every change the
events reported is looked at (STAMP: the guard record it compared with, `record_stamp`), or
`blind REASON` when the events cannot vouch for the checkout; anything else, or no answer, and
the caller walks the checkout itself.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox.core.digest import sha256

ANSWER_LIMIT = 4096
_CREDENTIALS = struct.Struct("3i")


def socket_name(state_root: Path, slug: str) -> bytes:
    key = sha256(f"{os.geteuid()}\0{state_root}\0{slug}".encode()).hexdigest()[:40]
    return f"\0opencode-sandbox-looks-{key}".encode()


def record_stamp(record: Path) -> str:
    """The guard record's identity as the file system describes it; "none" when there is none."""
    try:
        found = record.stat()
    except OSError:
        return "none"
    return f"{found.st_ino}:{found.st_size}:{found.st_mtime_ns}:{found.st_ctime_ns}"


def _peer_uid(connection: socket.socket) -> int:
    _, uid, _ = _CREDENTIALS.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          _CREDENTIALS.size))
    return int(uid)


class LookServer:
    """Answers each question with `look()`, one at a time, in a thread of the reaper."""

    def __init__(self, name: bytes, look: Callable[[], str]) -> None:
        self._look = look
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._listener.bind(name)
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._serve, name="looks", daemon=True)

    def start(self) -> LookServer:
        self._thread.start()
        return self

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with connection:
                try:
                    connection.settimeout(5)
                    if _peer_uid(connection) != os.geteuid() or connection.recv(16) != b"look\n":
                        continue
                    answer = self._look()
                    connection.sendall(answer.encode(errors="replace")[:ANSWER_LIMIT])
                except OSError:
                    continue


def ask_to_look(state_root: Path, slug: str, timeout_s: float = 30.0) -> str | None:
    """The reaper's answer, None when no reaper of this user answers."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    connection.settimeout(timeout_s)
    with connection:
        try:
            connection.connect(socket_name(state_root, slug))
            if _peer_uid(connection) != os.geteuid():
                return None
            connection.sendall(b"look\n")
            received = b""
            while chunk := connection.recv(ANSWER_LIMIT):
                received += chunk
                if len(received) >= ANSWER_LIMIT:
                    break
        except OSError:
            return None
    return received.decode(errors="replace")
