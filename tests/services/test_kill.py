"""`kill` powers the project's VM off at once; `kill --force` also removes it, keeping its home."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.runtime.types import RuntimeKind, SandboxStatus
from opencode_sandbox.services.stopping import kill
from opencode_sandbox.state.store import ProjectState
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import SLUG, make_app, plant_project, results_into

VM = vm_name(SLUG)
CREATED = datetime.now(UTC) - timedelta(days=1)


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    yield runtime
    runtime.close()


def running_project(fake: FakeRuntime, tmp_path: Path) -> str:
    volume, image = plant_project(fake, SLUG, volume_time=CREATED, status=SandboxStatus.RUNNING)
    make_app(fake, tmp_path).state.save(SLUG, ProjectState(home_volume=volume, image_reference=image))
    return volume


def test_kill_powers_off_and_keeps_the_vm(fake: FakeRuntime, tmp_path: Path) -> None:
    volume = running_project(fake, tmp_path)
    app = make_app(fake, tmp_path)
    lines: list[str] = []
    kill(results_into(app, lines), False)
    assert fake.sandboxes[VM].status is not SandboxStatus.RUNNING
    assert [operation for operation, _ in fake.calls if operation in ("kill_sandbox", "stop_sandbox")] == [
        "kill_sandbox"
    ]
    assert app.state.load(SLUG).home_volume == volume
    assert lines == [f"Killed {VM}."]


def test_kill_force_powers_off_then_removes_the_vm_and_keeps_the_home_volume(
    fake: FakeRuntime, tmp_path: Path
) -> None:
    volume = running_project(fake, tmp_path)
    app = make_app(fake, tmp_path)
    lines: list[str] = []
    kill(results_into(app, lines), True)
    operations = [operation for operation, _ in fake.calls if operation in ("kill_sandbox", "stop_sandbox",
                                                                            "remove_sandbox")]
    assert operations == ["kill_sandbox", "remove_sandbox"]
    assert VM not in fake.sandboxes
    assert volume in fake.volumes
    assert not app.state.state_path(SLUG).exists()
    assert lines == [
        f"Killed {VM}.",
        f"Removed {VM}.",
        f"Removed the state file; the home volume {volume} is kept (see `opencode-sandbox volume list`).",
    ]


def test_kill_force_without_a_vm_still_forgets_the_state(fake: FakeRuntime, tmp_path: Path) -> None:
    app = make_app(fake, tmp_path)
    app.state.save(SLUG, ProjectState(home_volume="kept-volume"))
    lines: list[str] = []
    kill(results_into(app, lines), True)
    assert not app.state.state_path(SLUG).exists()
    assert lines[0] == f"No VM for this project ({VM})."
    assert "kept-volume is kept" in lines[-1]
