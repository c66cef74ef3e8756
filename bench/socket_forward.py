"""A local unix socket in front of a TCP Docker engine, as a real host has one.

The lab's guest reaches the host's engine over TCP (`DOCKER_HOST=tcp://...`), where the
launcher falls back from its socket client to the `docker` command; users' hosts have the
local socket. A benchmark that measures the launcher as users run it puts this in front.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            target.sendall(chunk)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _serve(listener: socket.socket, address: tuple[str, int]) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(address)
        except OSError:
            client.close()
            continue
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def forward_unix_to_tcp(path: Path, docker_host: str) -> socket.socket:
    """Listen on `path`, relaying each connection to `docker_host` (`tcp://HOST:PORT`); close
    the returned listener to stop."""
    host, _, port = docker_host.removeprefix("tcp://").rstrip("/").rpartition(":")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, (host, int(port))), daemon=True).start()
    return listener
