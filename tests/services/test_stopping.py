"""`stop` with clients attached, on the fake runtime: who is asked, what is said, what stops."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.types import RuntimeKind, SandboxStatus
from opencode_sandbox.services.stopping import stop
from opencode_sandbox.state.leases import Lease, acquire_lease, release_lease
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import SLUG, make_app, plant_project, results_into

VM = vm_name(SLUG)


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    plant_project(runtime, SLUG, volume_time=datetime.now(UTC), status=SandboxStatus.RUNNING)
    yield runtime
    runtime.close()


@pytest.fixture
def two_clients() -> Iterator[list[Lease]]:
    state_root = ToolPaths.from_environment().state_dir
    leases = [acquire_lease(state_root, SLUG, "opencode-sandbox run --serve-only"),
              acquire_lease(state_root, SLUG, "opencode-sandbox shell -- make test")]
    yield leases
    for lease in leases:
        release_lease(lease)


class Asker:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.questions: list[str] = []

    def __call__(self, question: str) -> bool:
        self.questions.append(question)
        return self.answer


def never_asked(question: str) -> bool:
    raise AssertionError(f"asked: {question}")


def test_on_a_terminal_the_question_names_the_clients_and_no_keeps_the_vm(
    fake: FakeRuntime, tmp_path: Path, two_clients: list[Lease]
) -> None:
    lines: list[str] = []
    asker = Asker(False)
    stop(results_into(make_app(fake, tmp_path, interactive=True), lines), False, ask=asker)
    [question] = asker.questions
    assert question.startswith(f"2 clients are attached to {VM}:")
    assert "opencode-sandbox run --serve-only, attached" in question
    assert "opencode-sandbox shell -- make test, attached" in question
    assert question.count("pid ") == 2
    assert fake.sandboxes[VM].status is SandboxStatus.RUNNING
    assert lines == [f"{VM} keeps running."]


def test_on_a_terminal_yes_stops_and_counts_the_clients_cut_off(
    fake: FakeRuntime, tmp_path: Path, two_clients: list[Lease]
) -> None:
    lines: list[str] = []
    stop(results_into(make_app(fake, tmp_path, interactive=True), lines), False, ask=Asker(True))
    assert fake.sandboxes[VM].status is SandboxStatus.STOPPED
    assert lines == [f"Stopped {VM}. 2 attached clients were cut off."]


@pytest.mark.parametrize("assume_yes", [False, True], ids=["no-terminal", "yes-flag"])
def test_without_a_terminal_or_with_yes_it_stops_without_asking(
    fake: FakeRuntime, tmp_path: Path, two_clients: list[Lease], assume_yes: bool
) -> None:
    lines: list[str] = []
    app = make_app(fake, tmp_path, interactive=False, assume_yes=assume_yes)
    stop(results_into(app, lines), False, ask=never_asked)
    assert fake.sandboxes[VM].status is SandboxStatus.STOPPED
    assert lines == [f"Stopped {VM}. 2 attached clients were cut off."]


def test_with_no_client_attached_nobody_is_asked(fake: FakeRuntime, tmp_path: Path) -> None:
    lines: list[str] = []
    stop(results_into(make_app(fake, tmp_path, interactive=True), lines), False, ask=never_asked)
    assert fake.sandboxes[VM].status is SandboxStatus.STOPPED
    assert lines == [f"Stopped {VM}."]


def test_a_stopped_vm_is_not_a_question_even_with_a_lease(
    fake: FakeRuntime, tmp_path: Path, two_clients: list[Lease]
) -> None:
    fake.stop_sandbox(VM)
    lines: list[str] = []
    stop(results_into(make_app(fake, tmp_path, interactive=True), lines), True, ask=never_asked)
    assert VM not in fake.sandboxes
    assert lines[:2] == [f"{VM} is already stopped.", f"Removed {VM}."]


def test_declining_a_forced_stop_removes_nothing(fake: FakeRuntime, tmp_path: Path, two_clients: list[Lease]) -> None:
    stop(make_app(fake, tmp_path, interactive=True), True, ask=Asker(False))
    assert fake.sandboxes[VM].status is SandboxStatus.RUNNING


@pytest.mark.parametrize("remove_with", ["stop", "kill"])
def test_a_removal_on_the_runtime_without_the_vm_keeps_the_other_runtimes_vm_and_state(
    fake: FakeRuntime, tmp_path: Path, remove_with: str
) -> None:
    """`stop -f` (or `kill -f`) without `--runtime docker` for a project whose VM runs on docker."""
    from opencode_sandbox.errors import UsageError
    from opencode_sandbox.services.stopping import kill

    chosen = FakeRuntime(RuntimeKind.MICROSANDBOX)
    app = make_app(chosen, tmp_path, other=fake)
    app.state.save(SLUG, app.state.load(SLUG)._replace(home_volume="opencode-sandbox-home-kept"))
    try:
        with pytest.raises(UsageError) as refused:
            if remove_with == "stop":
                stop(app, True, ask=never_asked)
            else:
                kill(app, True)
    finally:
        chosen.close()
    assert "on the docker runtime" in refused.value.message
    assert "--runtime docker stop -f" in str(refused.value.hint)
    assert app.state.load(SLUG).home_volume == "opencode-sandbox-home-kept", "the state file stays"
    assert fake.sandboxes[VM].status is SandboxStatus.RUNNING


def test_a_removal_with_no_vm_on_either_runtime_removes_the_state_file(tmp_path: Path) -> None:
    chosen, other = FakeRuntime(RuntimeKind.MICROSANDBOX), FakeRuntime(RuntimeKind.DOCKER)
    app = make_app(chosen, tmp_path, other=other)
    app.state.save(SLUG, app.state.load(SLUG)._replace(home_volume="opencode-sandbox-home-kept"))
    try:
        stop(app, True, ask=never_asked)
    finally:
        chosen.close()
        other.close()
    assert app.state.load(SLUG).home_volume is None
