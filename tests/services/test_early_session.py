"""A terminal agent's session started while the start checks: only in the project's VM as the
agent needs it, read from the VM's output as untrusted text, and ended unless a client watches it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.core.naming import LABEL_AGENT, vm_name
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.guest.terminal_session import end_unwatched_command, start_command
from opencode_sandbox.runtime.types import ExecResult, SandboxStatus
from opencode_sandbox.services.start import client as clients
from opencode_sandbox.services.start.early_session import EarlySession
from opencode_sandbox.services.start.pipeline import ReadyVm, Start
from opencode_sandbox.ui.console import LogLevel
from tests.fakes.runtime import ExecCall, FakeRuntime
from tests.services.app_fakes import SLUG, make_app, messages, plant_project

VM = vm_name(SLUG)
CLAUDE = profile_of("claude-code")


class Tmux:
    """The VM's tmux: what `new-session` prints and how it ends."""

    def __init__(self) -> None:
        self.answer = ExecResult(exit_code=0, stdout="$7\n", stderr="")
        self.calls: list[ExecCall] = []

    def __call__(self, call: ExecCall) -> ExecResult:
        self.calls.append(call)
        return self.answer


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    plant_project(fake, SLUG, volume_time=datetime(2026, 12, 1, tzinfo=UTC), status=SandboxStatus.RUNNING)
    fake.sandboxes[VM].labels[LABEL_AGENT] = "claude-code"
    yield fake
    fake.close()


@pytest.fixture
def tmux(runtime: FakeRuntime) -> Tmux:
    answering = Tmux()
    runtime.on_exec("tmux", answering)
    return answering


def start(runtime: FakeRuntime, tmp_path: Path) -> EarlySession | None:
    return EarlySession.start(make_app(runtime, tmp_path), VM, CLAUDE, ["--resume"], (132, 41), {"TERM": "xterm"})


def test_the_agent_starts_in_the_running_vm_on_a_window_of_the_terminals_size(
        runtime: FakeRuntime, tmux: Tmux, tmp_path: Path) -> None:
    session = start(runtime, tmp_path)
    assert session is not None and session.session_id == "$7"
    [call] = tmux.calls
    assert list(call.argv) == start_command(CLAUDE, ["--resume"], 132, 41)
    assert (call.user, call.workdir, call.env.get("TERM")) == ("dev", "/workspace", "xterm")
    assert call.argv[call.argv.index("-x") + 1:call.argv.index("-y") + 2] == ("132", "-y", "41")


@pytest.mark.parametrize("vm", ["missing", "stopped", "another agent's", "made before agents"])
def test_nothing_starts_in_a_vm_the_start_must_first_make_start_or_change(
        runtime: FakeRuntime, tmux: Tmux, tmp_path: Path, vm: str) -> None:
    if vm == "missing":
        runtime.sandboxes.clear()
    elif vm == "stopped":
        runtime.stop_sandbox(VM)
    elif vm == "another agent's":
        runtime.sandboxes[VM].labels[LABEL_AGENT] = "codex"
    else:  # an older version's VM, without the agent label: opencode's
        del runtime.sandboxes[VM].labels[LABEL_AGENT]
    assert start(runtime, tmp_path) is None
    assert tmux.calls == []


def test_a_session_that_runs_already_is_left_to_the_attach(runtime: FakeRuntime, tmux: Tmux, tmp_path: Path) -> None:
    tmux.answer = ExecResult(exit_code=1, stdout="", stderr="duplicate session: agent\n")
    assert start(runtime, tmp_path) is None


@pytest.mark.parametrize("printed", ["", "agent", "$7; reboot", "$" + "9" * 12, "$7\n$8", "\x1b]0;$7\x07"])
def test_what_the_vms_tmux_prints_is_taken_only_as_a_session_id(
        runtime: FakeRuntime, tmux: Tmux, tmp_path: Path, printed: str) -> None:
    tmux.answer = ExecResult(exit_code=0, stdout=printed, stderr="")
    assert start(runtime, tmp_path) is None


def test_a_vm_that_does_not_answer_leaves_the_start_to_go_on_without_it(
        runtime: FakeRuntime, tmp_path: Path) -> None:
    def stalled(call: ExecCall) -> ExecResult:
        raise SandboxError("`tmux ...` did not finish within 10 s", hint="")

    runtime.on_exec("tmux", stalled)
    assert start(runtime, tmp_path) is None


def test_ending_the_session_spares_one_a_client_watches(runtime: FakeRuntime, tmux: Tmux, tmp_path: Path) -> None:
    session = start(runtime, tmp_path)
    assert session is not None
    ended: list[ExecCall] = []

    def end(call: ExecCall) -> ExecResult:
        ended.append(call)
        return ExecResult(exit_code=0, stdout="", stderr="")

    runtime.on_exec("sh", end)
    session.end()
    [call] = ended
    assert list(call.argv) == end_unwatched_command("$7")


def test_an_end_that_fails_is_only_logged(runtime: FakeRuntime, tmux: Tmux, tmp_path: Path) -> None:
    app = make_app(runtime, tmp_path)
    app.console.level = LogLevel.VERBOSE
    session = EarlySession.start(app, VM, CLAUDE, [], (80, 24), None)
    assert session is not None
    runtime.stop_sandbox(VM)  # the VM went away meanwhile, and the session with it
    session.end()
    assert "the early session $7 was not ended: sandbox " in messages(app)


class Watched(EarlySession):
    """An early session whose ends are counted."""

    def __init__(self) -> None:
        self.ended = 0

    def end(self) -> None:
        self.ended += 1


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, runtime: FakeRuntime, tmp_path: Path) -> Client:
    monkeypatch.setattr(clients, "_hand_to_reaper", lambda app, ready, leaving=False: None)
    return Client(monkeypatch, make_app(runtime, tmp_path))


class Client:
    """`client_of_vm` with a start that ends as a test says."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, app: App) -> None:
        self.monkeypatch = monkeypatch
        self.app = app
        self.session = Watched()
        self.started = 0

    def start_early(self) -> EarlySession:
        self.started += 1
        return self.session

    def run(self, prepared: Callable[[], ReadyVm], rebuild: bool = False) -> None:
        self.monkeypatch.setattr(Start, "prepare", lambda start, *args: prepared())
        with clients.client_of_vm(self.app, rebuild, wait_for_daemon=False, start_early=self.start_early):
            pass


@pytest.mark.parametrize("kept", [True, False], ids=["kept as found", "changed"])
def test_the_early_session_stays_only_when_the_start_kept_the_vm_as_it_found_it(client: Client, kept: bool) -> None:
    client.run(lambda: ReadyVm(VM, "http://127.0.0.1:9", "password", kept_as_found=kept))
    assert client.started == 1
    assert client.session.ended == (0 if kept else 1)


def test_a_start_that_fails_ends_the_early_session(client: Client) -> None:
    def failing() -> ReadyVm:
        raise SandboxError("the image does not build", hint="fix the Dockerfile")

    with pytest.raises(SandboxError, match="does not build"):
        client.run(failing)
    assert (client.started, client.session.ended) == (1, 1)


def test_a_rebuild_starts_nothing_before_its_new_image(client: Client) -> None:
    client.run(lambda: ReadyVm(VM, "http://127.0.0.1:9", "password"), rebuild=True)
    assert client.started == 0
