"""One HTTP/1.0 GET over an already connected socket, on the standard library's socket alone.

The warm start path asks the Docker engine and the opencode daemon a handful of questions;
http.client would load the ssl and email packages first, which costs more than the answers.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping


class PlainHttpError(OSError):
    """The peer did not answer with a readable HTTP response."""


def get(connection: socket.socket, host: str, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """Send `GET path` and read the whole response; the connection is closed afterwards."""
    lines = [f"GET {path} HTTP/1.0", f"Host: {host}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    with connection:
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        chunks = []
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, separator, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if not separator or len(status_line) < 2 or not status_line[1].isdigit():
        raise PlainHttpError(f"not an HTTP response to GET {path}")
    return int(status_line[1]), body


def unix_get(socket_path: str, path: str, timeout_s: float) -> tuple[int, bytes]:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout_s)
    try:
        connection.connect(socket_path)
    except OSError:
        connection.close()
        raise
    return get(connection, "docker", path)


def tcp_get(host: str, port: int, path: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    connection = socket.create_connection((host, port), timeout=timeout_s)
    return get(connection, f"{host}:{port}", path, headers)
