"""The Docker Engine API over the local engine's unix socket: the package's one client of it.

Each `docker inspect` process costs tens of milliseconds; the same answer over the socket
costs about one. Only plain local engines qualify: with a `DOCKER_HOST` that is not a unix
socket, or a Docker context other than the default, callers use the `docker` command."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from opencode_sandbox import TYPE_CHECKING, plain_http

if TYPE_CHECKING:
    from typing import Any

DEFAULT_SOCKET = "/var/run/docker.sock"
_KIND_PATHS = {"container": "/containers/{}/json", "image": "/images/{}/json", "volume": "/volumes/{}",
               "network": "/networks/{}"}


class ApiUnavailable(Exception):
    """The socket cannot be used; the caller falls back to the `docker` command."""


def _uses_other_context(environ: Mapping[str, str]) -> bool:
    if environ.get("DOCKER_CONTEXT", "default") != "default":
        return True
    config_dir = Path(environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    try:
        config = json.loads((config_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("currentContext", "default") not in ("default", "", None)


def local_socket(environ: Mapping[str, str] | None = None) -> str | None:
    """The engine's unix socket when plain local access applies (in `environ`, by default this
    process's environment), else None."""
    environ = os.environ if environ is None else environ
    host = environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    if _uses_other_context(environ):
        return None
    path = host.removeprefix("unix://") or DEFAULT_SOCKET
    return path if os.path.exists(path) else None


class DockerApi:
    def __init__(self, socket_path: str, timeout_s: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    @classmethod
    def for_environment(cls, environ: Mapping[str, str] | None = None) -> DockerApi | None:
        """A client of the local engine, or None when the `docker` command must serve."""
        path = local_socket(environ)
        return cls(path) if path else None

    def connect(self, timeout_s: float | None = None) -> socket.socket:
        """A connected socket, with `timeout_s` (default: this API's) on each operation."""
        try:
            return plain_http.unix_connect(self.socket_path, timeout_s or self.timeout_s)
        except OSError as error:
            raise ApiUnavailable(str(error)) from None

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            return plain_http.unix_get(self.socket_path, path, self.timeout_s)
        except OSError as error:
            raise ApiUnavailable(str(error)) from None

    def get_json(self, path: str) -> tuple[int, Any]:
        return _decoded(path, *self.get(path))

    def post_json(self, path: str, document: Any = None, timeout_s: float | None = None) -> tuple[int, Any]:
        """POST `document` as JSON (no body for None); the status and the decoded answer."""
        body = b"" if document is None else json.dumps(document).encode()
        headers = {"Content-Type": "application/json"} if body else {}
        try:
            answer = plain_http.request(self.connect(timeout_s), "POST", "docker", path, body=body, headers=headers)
        except OSError as error:
            raise ApiUnavailable(str(error)) from None
        return _decoded(path, *answer)

    def inspect(self, kind: str, name: str) -> dict[str, Any] | None:
        """The same document `docker inspect --type KIND NAME` prints; None when missing."""
        status, document = self.get_json(inspect_path(kind, name))
        if status == 404:
            return None
        if status != 200 or not isinstance(document, dict):
            raise ApiUnavailable(f"{kind} {name}: HTTP {status}")
        return document


def inspect_path(kind: str, name: str) -> str:
    """The API path of `docker inspect --type KIND NAME`."""
    return _KIND_PATHS[kind].format(quote(name, safe="/:@"))


def error_message(document: Any) -> str:
    """The engine's own words from an error answer (`{"message": ...}`)."""
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        return str(document["message"]).strip()
    return ""


def _decoded(path: str, status: int, body: bytes) -> tuple[int, Any]:
    try:
        return status, json.loads(body) if body.strip() else None
    except ValueError:
        raise ApiUnavailable(f"unreadable answer from {path}") from None
