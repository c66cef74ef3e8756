"""Docker Engine API calls over the local socket, for the inspections and execs on hot paths.

Each `docker inspect` process costs tens of milliseconds; the same answer over the socket
costs about one. Only plain local engines qualify: with a `DOCKER_HOST` that is not a unix
socket, or a Docker context other than the default, callers use the `docker` command.

A start knows its first questions before it has loaded the code that asks them, so it can
ask them ahead (`read_ahead`) in a background thread while its imports run. An answer read
ahead is taken once, by the first `get` of its path, and only until this process changes
anything: every POST through the socket and every command the docker command wrappers run
forgets them all (`forget_read_ahead`), so no answer predates a change this process made.
What may be asked ahead, given changes other processes make, is decided by the caller
(`services/read_ahead.py`)."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from urllib.parse import quote

from opencode_sandbox import TYPE_CHECKING, plain_http

if TYPE_CHECKING:
    from typing import Any

DEFAULT_SOCKET = "/var/run/docker.sock"
_KIND_PATHS = {"container": "/containers/{}/json", "image": "/images/{}/json", "volume": "/volumes/{}"}


class ApiUnavailable(Exception):
    """The socket cannot be used; the caller falls back to the `docker` command."""


def _uses_other_context() -> bool:
    if os.environ.get("DOCKER_CONTEXT", "default") != "default":
        return True
    config_dir = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    try:
        config = json.loads((config_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("currentContext", "default") not in ("default", "", None)


def local_socket() -> str | None:
    """The engine's unix socket when plain local access applies, else None."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    if _uses_other_context():
        return None
    path = host.removeprefix("unix://") or DEFAULT_SOCKET
    return path if os.path.exists(path) else None


class _Answer:
    __slots__ = ("ready", "result")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.result: tuple[int, bytes] | None = None  # None after a failure: the reader asks again


class DockerApi:
    def __init__(self, socket_path: str, timeout_s: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._ahead: dict[str, _Answer] = {}

    @classmethod
    def for_environment(cls) -> DockerApi | None:
        """The process's one client of the local engine, or None when the `docker` command must serve."""
        path = local_socket()
        if not path:
            return None
        if path not in _SHARED:
            _SHARED[path] = cls(path)
        return _SHARED[path]

    def connect(self, timeout_s: float | None = None) -> socket.socket:
        """A connected socket, with `timeout_s` (default: this API's) on each operation."""
        try:
            return plain_http.unix_connect(self.socket_path, timeout_s or self.timeout_s)
        except OSError as error:
            raise ApiUnavailable(str(error)) from None

    def read_ahead(self, paths: Iterable[str]) -> None:
        """GET `paths` in a background thread; the next `get` of each takes that answer."""
        answers = {path: _Answer() for path in paths if path not in self._ahead}
        if not answers:
            return
        self._ahead.update(answers)
        threading.Thread(target=self._fetch, args=(answers,), name="docker-read-ahead", daemon=True).start()

    def forget_read_ahead(self) -> None:
        self._ahead.clear()

    def _fetch(self, answers: dict[str, _Answer]) -> None:
        for path, answer in answers.items():
            with suppress(OSError):
                answer.result = plain_http.unix_get(self.socket_path, path, self.timeout_s)
            answer.ready.set()

    def get(self, path: str) -> tuple[int, bytes]:
        answer = self._ahead.pop(path, None)
        if answer is not None and answer.ready.wait(self.timeout_s) and answer.result is not None:
            return answer.result
        try:  # asked now; also when the question asked ahead failed, so the failure is this call's own
            return plain_http.unix_get(self.socket_path, path, self.timeout_s)
        except OSError as error:
            raise ApiUnavailable(str(error)) from None

    def get_json(self, path: str) -> tuple[int, Any]:
        return _decoded(path, *self.get(path))

    def post_json(self, path: str, document: Any = None, timeout_s: float | None = None) -> tuple[int, Any]:
        """POST `document` as JSON (no body for None); the status and the decoded answer."""
        self.forget_read_ahead()
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


_SHARED: dict[str, DockerApi] = {}


def inspect_path(kind: str, name: str) -> str:
    """The API path of `docker inspect --type KIND NAME`."""
    return _KIND_PATHS[kind].format(quote(name, safe="/:@"))


def forget_read_ahead() -> None:
    """Drop every answer read ahead: this process is about to change something in the engine."""
    for api in _SHARED.values():
        api.forget_read_ahead()


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
