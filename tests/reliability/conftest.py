"""Fixtures of the reliability suite: fresh projects on the docker runtime, as end-to-end tests make them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.paths import ToolPaths
from tests.e2e.conftest import project
from tests.e2e.harness import Project, make_project
from tests.fixtures.images import RunnerBase

__all__ = ["project", "projects"]


@pytest.fixture
def projects(tmp_path: Path, unique: str, runner_base_image: RunnerBase,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], list[Project]]]:
    """A maker of several fresh projects on the docker runtime; all are cleaned up at the end."""
    record_baked_version(ToolPaths.from_environment().state_dir, runner_base_image.opencode_version)
    monkeypatch.setenv("OPENCODE_SANDBOX_RUNTIME", "docker")
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", "1h")
    made: list[Project] = []

    def make(count: int) -> list[Project]:
        for _ in range(count):
            made.append(make_project(tmp_path / f"project-{len(made)}", f"{unique}-{len(made)}"))
        return made[-count:]

    try:
        yield make
    finally:
        for created in made:
            created.cleanup()
