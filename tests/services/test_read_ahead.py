"""What a start asks the engine ahead: the engine, the base images and the recorded project image."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core.naming import BASE_IMAGES
from opencode_sandbox.runtime import docker_api
from opencode_sandbox.runtime.docker_api import DockerApi, inspect_path
from opencode_sandbox.services import image_record
from opencode_sandbox.services.read_ahead import read_ahead_for_start
from tests.fakes.runtime import FakeRuntime
from tests.fixtures.scripted_engine import Handler, ScriptedEngine, engine_at, json_answer
from tests.services.app_fakes import make_app

__all__ = ["engine_at"]  # a fixture, used by name


def asked_paths(engine: ScriptedEngine, count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while len(engine.requests) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # nothing more should come
    return [target for _, target, _, _ in engine.requests]


@pytest.mark.parametrize("runtime", ["docker", "microsandbox"])
def test_a_start_asks_ahead_only_what_cannot_mislead(
    engine_at: Callable[[Handler], ScriptedEngine], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, runtime: str,
) -> None:
    engine = engine_at(lambda method, target, headers, body, connection: connection.sendall(
        json_answer("200 OK", {"Id": "sha256:1"})))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{engine.path}")
    monkeypatch.setenv("OPENCODE_SANDBOX_RUNTIME", runtime)
    monkeypatch.setattr(docker_api, "_SHARED", {})
    app = make_app(FakeRuntime(), tmp_path)
    app.settings = load_settings([], os.environ, {})
    reference = "opencode-sandbox/runner-demo:0123456789abcdef"
    image_record.remember(app.paths.state_dir / app.project.slug, "signature",
                          image_record.CheckedImage(reference, "sha256:1", {}, None, {}))
    read_ahead_for_start(app)
    expected = [inspect_path("image", name) for name in (*BASE_IMAGES, reference)]
    if runtime == "docker":
        expected.insert(0, "/_ping")
    assert asked_paths(engine, len(expected)) == expected
    api = DockerApi.for_environment()
    assert api is not None
    api.get(inspect_path("image", reference))
    assert len(engine.requests) == len(expected)  # the start's own question took the answer


def test_without_a_record_or_a_local_engine_nothing_more_is_asked(
    engine_at: Callable[[Handler], ScriptedEngine], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    engine = engine_at(lambda method, target, headers, body, connection: connection.sendall(
        json_answer("200 OK", {"Id": "sha256:1"})))
    monkeypatch.setattr(docker_api, "_SHARED", {})
    monkeypatch.setenv("OPENCODE_SANDBOX_RUNTIME", "docker")
    app = make_app(FakeRuntime(), tmp_path)
    app.settings = load_settings([], os.environ, {})
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    read_ahead_for_start(app)
    assert docker_api._SHARED == {}
    monkeypatch.setenv("DOCKER_HOST", f"unix://{engine.path}")
    read_ahead_for_start(app)
    assert asked_paths(engine, 3) == ["/_ping", *(inspect_path("image", name) for name in BASE_IMAGES)]
