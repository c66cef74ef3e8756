"""Answers read ahead: taken once, and never after this process changed something."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from opencode_sandbox.runtime import docker_api
from opencode_sandbox.runtime.docker_api import DockerApi, forget_read_ahead, inspect_path
from tests.fixtures.scripted_engine import Handler, ScriptedEngine, engine_at, json_answer

__all__ = ["engine_at"]  # a fixture, used by name


class CountingEngine:
    """Answers every GET with the number of GETs of that path so far, so an answer shows its age."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.release = threading.Event()
        self.release.set()

    def __call__(self, method: str, target: str, headers: dict[str, str], body: bytes,
                 connection: socket.socket) -> None:
        self.release.wait(10)
        if method == "POST":
            connection.sendall(json_answer("204 No Content", None))
            return
        self.counts[target] = self.counts.get(target, 0) + 1
        connection.sendall(json_answer("200 OK", {"Id": f"{target}#{self.counts[target]}"}))


def gets(engine: ScriptedEngine, path: str) -> int:
    return sum(1 for method, target, _, _ in engine.requests if method == "GET" and target == path)


def test_an_answer_read_ahead_is_taken_once(engine_at: Callable[[Handler], ScriptedEngine]) -> None:
    answers = CountingEngine()
    engine = engine_at(answers)
    api = DockerApi(engine.path)
    path = inspect_path("image", "opencode-sandbox/runner-base:latest")
    api.read_ahead([path, "/_ping"])
    assert api.get_json(path) == (200, {"Id": f"{path}#1"})
    assert gets(engine, path) == 1  # not asked again for the first read
    assert api.get_json(path) == (200, {"Id": f"{path}#2"})  # the next read is fresh


def test_a_read_waits_for_an_answer_still_on_its_way(engine_at: Callable[[Handler], ScriptedEngine]) -> None:
    answers = CountingEngine()
    answers.release.clear()
    engine = engine_at(answers)
    api = DockerApi(engine.path)
    api.read_ahead(["/_ping"])
    threading.Timer(0.2, answers.release.set).start()
    assert api.get_json("/_ping") == (200, {"Id": "/_ping#1"})
    assert gets(engine, "/_ping") == 1


def test_a_change_through_the_socket_forgets_what_was_read_ahead(
    engine_at: Callable[[Handler], ScriptedEngine],
) -> None:
    answers = CountingEngine()
    engine = engine_at(answers)
    api = DockerApi(engine.path)
    path = inspect_path("container", "box")
    api.read_ahead([path])
    answered_ahead(engine, path, 1)
    api.post_json("/containers/box/start")
    assert api.get_json(path)[1] == {"Id": f"{path}#2"}


def test_a_docker_command_forgets_what_the_shared_client_read_ahead(
    engine_at: Callable[[Handler], ScriptedEngine], monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = CountingEngine()
    engine = engine_at(answers)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{engine.path}")
    monkeypatch.setattr(docker_api, "_SHARED", {})
    api = DockerApi.for_environment()
    assert api is not None and api is DockerApi.for_environment()
    path = inspect_path("image", "x:1")
    api.read_ahead([path])
    answered_ahead(engine, path, 1)
    from opencode_sandbox.runtime.docker_cli import DockerCli

    DockerCli().command(["image", "rm", "x:1"])  # about to run: whatever was read may change
    assert api.get_json(path)[1] == {"Id": f"{path}#2"}
    api.read_ahead([path])
    answered_ahead(engine, path, 3)
    forget_read_ahead()
    assert api.get_json(path)[1] == {"Id": f"{path}#4"}


def answered_ahead(engine: ScriptedEngine, path: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while gets(engine, path) < count:
        assert time.monotonic() < deadline, "the read-ahead never reached the engine"
        time.sleep(0.01)


def test_a_failed_read_ahead_is_asked_again_and_fails_as_its_own(tmp_path: Path) -> None:
    api = DockerApi(str(tmp_path / "nothing.sock"), timeout_s=2)
    api.read_ahead(["/_ping"])
    with pytest.raises(docker_api.ApiUnavailable):
        api.get("/_ping")
