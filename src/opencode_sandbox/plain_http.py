"""Plain HTTP over an already connected socket, on the standard library's socket alone.

The warm start path asks the Docker engine and the opencode daemon a handful of questions;
http.client would load the ssl and email packages first, which costs more than the answers.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD_BYTES = 65536
_WITHOUT_BODY = (204, 304)
"""Statuses whose response ends with its head, whatever `Content-Length` says."""


class PlainHttpError(OSError):
    """The peer did not answer with a readable HTTP response."""


def send(
    connection: socket.socket,
    method: str,
    host: str,
    path: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    version: str = "HTTP/1.0",
) -> None:
    """Send one request; `Content-Length` goes with a body and with every method but GET and HEAD."""
    lines = [f"{method} {path} {version}", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {len(body)}")
    connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


def read_head(connection: socket.socket, asked: str = "the request") -> tuple[int, dict[str, str], bytes]:
    """Read a response's header block: its status, its headers (lower-case names) and the bytes after it."""
    received = b""
    while _HEAD_END not in received:
        if len(received) > _MAX_HEAD_BYTES:
            raise PlainHttpError(f"the response head to {asked} does not end")
        chunk = connection.recv(65536)
        if not chunk:
            raise PlainHttpError(f"not an HTTP response to {asked}: the peer closed the connection before "
                                 "the end of the response head")
        received += chunk
    head, _, rest = received.partition(_HEAD_END)
    return _status_of(head, asked), _headers_of(head), rest


def read_body(connection: socket.socket, headers: Mapping[str, str], received: bytes) -> bytes:
    """The rest of a body after `received`: `Content-Length` bytes, or everything up to the close.

    With a `Content-Length`, reading stops there, so a peer that keeps the connection open
    after the body is not waited for; a body cut short of it is refused.
    """
    length = headers.get("content-length", "")
    wanted = int(length) if length.isdigit() else None
    chunks = [received]
    size = len(received)
    while wanted is None or size < wanted:
        chunk = connection.recv(65536)
        if not chunk:
            if wanted is not None:
                raise PlainHttpError(f"the peer closed the connection after {size} of {wanted} bytes of the body")
            break
        chunks.append(chunk)
        size += len(chunk)
    body = b"".join(chunks)
    return body if wanted is None else body[:wanted]


def request(
    connection: socket.socket,
    method: str,
    host: str,
    path: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """Send one HTTP/1.0 request and read its response; the connection is closed afterwards."""
    with connection:
        send(connection, method, host, path, body=body, headers={"Connection": "close", **(headers or {})})
        status, response_headers, received = read_head(connection, f"{method} {path}")
        if method == "HEAD" or status in _WITHOUT_BODY:
            return status, b""
        return status, read_body(connection, response_headers, received)


def get(connection: socket.socket, host: str, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """Send `GET path` and read the whole response; the connection is closed afterwards."""
    return request(connection, "GET", host, path, headers=headers)


def unix_connect(socket_path: str, timeout_s: float | None) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout_s)
    try:
        connection.connect(socket_path)
    except OSError:
        connection.close()
        raise
    return connection


def unix_get(socket_path: str, path: str, timeout_s: float) -> tuple[int, bytes]:
    return get(unix_connect(socket_path, timeout_s), "docker", path)


def tcp_get(host: str, port: int, path: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    return get(_tcp_connect(host, port, timeout_s), f"{host}:{port}", path, headers)


def _tcp_connect(host: str, port: int, timeout_s: float) -> socket.socket:
    # An ASCII host name as bytes: as a str, the lookup would load the idna codec first.
    name: bytes | str = host.encode("ascii") if host.isascii() else host
    family, kind, protocol, _, address = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)[0]
    connection = socket.socket(family, kind, protocol)
    connection.settimeout(timeout_s)
    try:
        connection.connect(address)
    except OSError:
        connection.close()
        raise
    return connection


def _status_of(head: bytes, asked: str) -> int:
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise PlainHttpError(f"not an HTTP response to {asked}")
    return int(status_line[1])


def _headers_of(head: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, separator, value = line.decode("latin-1").partition(":")
        if separator:
            headers[name.strip().lower()] = value.strip()
    return headers
