"""The daemon step carries `plan_daemon` out on the fake runtime: what it asks, stops and starts."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest

from opencode_sandbox.core.lifecycle import DaemonAction, DaemonFacts
from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.errors import BootFailed
from opencode_sandbox.runtime.types import SandboxSpec
from opencode_sandbox.services import daemon_control
from opencode_sandbox.services.start.daemon import DaemonStep, DaemonTarget
from opencode_sandbox.ui.console import Console, LogLevel
from tests.fakes.runtime import FakeRuntime

SLUG = "step-0123456789abcd"
START_TIMEOUT_S = 600.0
VM = vm_name(SLUG)


class Server:
    """`opencode serve` in the fake VM, started and stopped by the fake guest operations, answering or not."""

    def __init__(self, runtime: FakeRuntime, process: bool, answers: bool, comes_up: bool = True) -> None:
        self.state = runtime.guests.script_server(runtime, VM, running=process, answers=answers)
        self.state.comes_up = comes_up
        self.state.log = "listen EADDRINUSE"
        self.events = self.state.events

    @property
    def exits_at_start(self) -> bool:
        return self.state.exits_at_start

    @exits_at_start.setter
    def exits_at_start(self, value: bool) -> None:
        self.state.exits_at_start = value

    def healthy(self) -> bool:
        self.events.append("health")
        return self.state.answers


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    fake.add_docker_image("runner")
    fake.load_image("runner")
    fake.create_sandbox(SandboxSpec(VM, "runner", 1, 512, labels=managed_labels(SLUG)))
    try:
        yield fake
    finally:
        fake.close()


def step(runtime: FakeRuntime, server: Server, monkeypatch: pytest.MonkeyPatch, approve: bool | None = None,
         console: Console | None = None) -> tuple[DaemonStep, list[str]]:
    """The step, and what it recorded (`asked N`, `recorded`) beside the server's events."""
    noted = server.events

    def ask_restart(other_clients: int) -> bool:
        noted.append(f"asked {other_clients}")
        assert approve is not None, "asked without an answer ready"
        return approve

    monkeypatch.setattr(DaemonStep, "_healthy", lambda self: server.healthy())
    def wait_until_healthy(check: Callable[[], bool], timeout_s: float, still_running: object = None) -> bool:
        assert timeout_s == START_TIMEOUT_S, "the configured daemon-start-timeout is what a start waits"
        return check()

    monkeypatch.setattr(daemon_control, "wait_until_healthy", wait_until_healthy)
    console = console or Console(LogLevel.ERROR, stream=io.StringIO())
    target = DaemonTarget("http://127.0.0.1:1", "secret", "home", START_TIMEOUT_S)
    made = DaemonStep(runtime.guests(runtime, VM), console, target, ask_restart, lambda: noted.append("recorded"))
    return made, noted


def test_a_booted_vm_gets_a_start_without_any_question(runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(runtime, process=False, answers=False)
    daemon, events = step(runtime, server, monkeypatch)
    assert daemon.ensure(DaemonFacts(booted=True, wait=True, config_changed=True, other_clients=1)) is None
    assert events == ["start", "health", "recorded"]


def test_a_serving_daemon_is_kept(runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(runtime, process=True, answers=True)
    daemon, events = step(runtime, server, monkeypatch)
    assert daemon.ensure(DaemonFacts(booted=False, wait=True, config_changed=False, other_clients=0)) is None
    assert events == ["health"]


@pytest.mark.parametrize(("approve", "expected"), [
    (False, ["health", "asked 2"]),
    (True, ["health", "asked 2", "stop", "start", "health", "recorded"]),
])
def test_a_changed_configuration_restarts_only_when_the_attached_clients_allow(
    approve: bool, expected: list[str], runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(runtime, process=True, answers=True)
    daemon, events = step(runtime, server, monkeypatch, approve=approve)
    assert daemon.ensure(DaemonFacts(booted=False, wait=True, config_changed=True, other_clients=2)) is None
    assert events == expected


def test_a_server_still_coming_up_is_waited_for_and_the_wait_is_shown(runtime: FakeRuntime,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(runtime, process=True, answers=False)
    shown = io.StringIO()
    daemon, events = step(runtime, server, monkeypatch, console=Console(LogLevel.INFO, stream=shown))
    monkeypatch.setattr(daemon_control, "wait_until_healthy", lambda check, timeout_s, still_running=None: True)
    assert daemon.ensure(DaemonFacts(booted=False, wait=True, config_changed=False, other_clients=1)) is None
    assert events == ["health", "running?"]
    assert "Waiting for opencode serve, started earlier, to answer" in shown.getvalue()


@pytest.mark.parametrize("booted", [True, False])
@pytest.mark.parametrize("answers", [True, False])
def test_a_shell_leaves_the_server_as_it_is(runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch, booted: bool,
                                            answers: bool) -> None:
    server = Server(runtime, process=answers, answers=answers)
    daemon, events = step(runtime, server, monkeypatch)
    assert daemon.ensure(DaemonFacts(booted=booted, wait=False, config_changed=True, other_clients=0)) is None
    assert events == [], "nothing asked, started, stopped or recorded"
    assert daemon.carried_out is not None and daemon.carried_out.action is DaemonAction.LEAVE


def test_a_server_that_never_answers_is_reported_with_its_log(
    runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(runtime, process=False, answers=False, comes_up=False)
    daemon, events = step(runtime, server, monkeypatch)
    with pytest.raises(BootFailed, match="listen EADDRINUSE") as silent:
        daemon.ensure(DaemonFacts(booted=True, wait=True, config_changed=False, other_clients=0))
    assert "recorded" not in events
    assert silent.value.message.startswith(f"opencode serve did not answer within {START_TIMEOUT_S:g} s in {VM}")
    assert "raise daemon-start-timeout" in (silent.value.hint or "")


def test_a_server_that_exits_before_it_answers_is_named_so(runtime: FakeRuntime,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(runtime, process=False, answers=False, comes_up=False)
    daemon, events = step(runtime, server, monkeypatch)
    server.exits_at_start = True
    with pytest.raises(BootFailed, match="listen EADDRINUSE") as exited:
        daemon.ensure(DaemonFacts(booted=True, wait=True, config_changed=False, other_clients=0))
    assert events[0] == "start" and "recorded" not in events
    assert exited.value.message.startswith(f"opencode serve exited before it answered in {VM}")
    assert "daemon-start-timeout" not in (exited.value.hint or "")
