"""A `shell -- CMD` made ready while the start checks: only in the project's VM as it should be,
run only once the start kept that VM as it found it, and dropped unstarted otherwise."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.runtime.types import ExecResult, RuntimeKind, SandboxStatus
from opencode_sandbox.services.start import client as clients
from opencode_sandbox.services.start.early_command import prepare_command
from opencode_sandbox.services.start.pipeline import ReadyVm, Start
from opencode_sandbox.ui.console import LogLevel
from tests.fakes.runtime import ExecCall, FakePreparedCommand, FakeRuntime
from tests.services.app_fakes import SLUG, make_app, messages, plant_project

VM = vm_name(SLUG)
COMMAND = ["make", "test"]


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    plant_project(fake, SLUG, volume_time=datetime(2026, 12, 1, tzinfo=UTC), status=SandboxStatus.RUNNING)
    ran: list[ExecCall] = []

    def make(call: ExecCall) -> ExecResult:
        ran.append(call)
        return ExecResult(exit_code=3, stdout="", stderr="")

    fake.on_exec("make", make)
    yield fake
    fake.close()


def commands_run(runtime: FakeRuntime) -> list[tuple[str, ...]]:
    return [call.argv for call in runtime.exec_calls if call.argv[0] == "make"]


def test_the_command_is_made_ready_in_the_running_vm_and_nothing_of_it_runs(
        runtime: FakeRuntime, tmp_path: Path) -> None:
    prepared = prepare_command(make_app(runtime, tmp_path), VM, COMMAND, "root")
    assert isinstance(prepared, FakePreparedCommand)
    assert (prepared.argv, prepared.user, prepared.workdir) == (tuple(COMMAND), "root", "/workspace")
    assert commands_run(runtime) == []
    prepared.end()
    assert commands_run(runtime) == []


@pytest.mark.parametrize("vm", ["missing", "stopped", "its policy to restore", "made before owner labels"])
def test_nothing_is_made_ready_in_a_vm_the_start_must_first_make_start_or_change(
        runtime: FakeRuntime, tmp_path: Path, vm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if vm == "missing":
        runtime.sandboxes.clear()
    elif vm == "stopped":
        runtime.stop_sandbox(VM)
    else:
        found = runtime.get_sandbox(VM)
        assert found is not None
        changed = found._replace(repair=True) if vm == "its policy to restore" else found._replace(
            owner_unlabelled=True)
        monkeypatch.setattr(runtime, "get_sandbox", lambda name: changed)
    assert prepare_command(make_app(runtime, tmp_path), VM, COMMAND, "dev") is None
    assert ("prepare_command", VM) not in runtime.calls


def test_a_runtime_that_makes_no_process_ahead_is_not_even_asked_about_the_vm(tmp_path: Path) -> None:
    msb = FakeRuntime(RuntimeKind.MICROSANDBOX)
    plant_project(msb, SLUG, volume_time=datetime(2026, 12, 1, tzinfo=UTC), status=SandboxStatus.RUNNING)
    msb.calls.clear()
    assert prepare_command(make_app(msb, tmp_path), VM, COMMAND, "dev") is None
    assert msb.calls == []


def test_an_engine_that_fails_leaves_the_start_to_go_on_without_it(runtime: FakeRuntime, tmp_path: Path) -> None:
    app = make_app(runtime, tmp_path)
    app.console.level = LogLevel.VERBOSE
    runtime.engine_down = True
    assert prepare_command(app, VM, COMMAND, "dev") is None
    assert "the command was not made ready while the start checks: the engine is not answering" in messages(app)


class Shell:
    """`run_shell` with a start that ends as a test says."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, app: App, runtime: FakeRuntime) -> None:
        self.monkeypatch = monkeypatch
        self.app = app
        self.runtime = runtime
        monkeypatch.setattr(clients, "_hand_to_reaper", lambda app, ready, leaving=False: None)
        self.terminal(False)

    def terminal(self, isatty: bool) -> None:
        stdin = io.StringIO()
        stdin.isatty = lambda: isatty  # type: ignore[method-assign]
        self.monkeypatch.setattr(clients.sys, "stdin", stdin)

    def run(self, ready: Callable[[], ReadyVm], command: list[str] | None = None) -> int:
        self.monkeypatch.setattr(Start, "prepare", lambda start, *args: ready())
        return clients.run_shell(self.app, False, False, COMMAND if command is None else command)

    def outcome(self) -> list[str]:
        return [operation for operation, _ in self.runtime.calls
                if operation in ("prepare_command", "run_prepared", "end_prepared", "attach")]


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, runtime: FakeRuntime, tmp_path: Path) -> Shell:
    return Shell(monkeypatch, make_app(runtime, tmp_path), runtime)


def ready(kept: bool) -> Callable[[], ReadyVm]:
    return lambda: ReadyVm(VM, "http://127.0.0.1:9", "password", kept_as_found=kept)


def test_a_start_that_kept_the_vm_runs_the_command_made_ready(shell: Shell, runtime: FakeRuntime) -> None:
    assert shell.run(ready(kept=True)) == 3
    assert shell.outcome() == ["prepare_command", "run_prepared"]
    assert commands_run(shell.runtime) == [tuple(COMMAND)]


def test_a_start_that_changed_the_vm_drops_it_unstarted_and_runs_the_command_anew(shell: Shell) -> None:
    assert shell.run(ready(kept=False)) == 3
    assert shell.outcome() == ["prepare_command", "end_prepared", "attach"]
    assert commands_run(shell.runtime) == [tuple(COMMAND)]


def test_a_start_that_fails_drops_it_unstarted(shell: Shell) -> None:
    def failing() -> ReadyVm:
        raise SandboxError("the image does not build", hint="fix the Dockerfile")

    with pytest.raises(SandboxError, match="does not build"):
        shell.run(failing)
    assert shell.outcome() == ["prepare_command", "end_prepared"]
    assert commands_run(shell.runtime) == []


def test_a_shell_on_a_terminal_makes_nothing_ready(shell: Shell) -> None:
    shell.terminal(True)
    assert shell.run(ready(kept=True)) == 3
    assert shell.outcome() == ["attach"]
