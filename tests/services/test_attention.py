"""The signal when the agent needs the user: a desktop notification where there is a desktop, else
one attached client's terminal bell; each event once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from opencode_sandbox.core import agents
from opencode_sandbox.core.agent_activity import AgentReport, AgentState
from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.attention import Attention
from opencode_sandbox.core.naming import managed_labels, runner_image, vm_name
from opencode_sandbox.core.quiescence import DaemonActivity
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.core.terminal_activity import QUIET_AFTER_S
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.types import SandboxSpec
from opencode_sandbox.services.attention import AttentionWatch, BellRinger, claim, desktop_command
from opencode_sandbox.services.reaper_settings import ReaperSettings
from opencode_sandbox.state_layout import ProjectLayout
from tests.fakes.runtime import FakeRuntime

SLUG = "shop-0123456789abcd"
VM = vm_name(SLUG)
ATTENTION = Attention("Codex is done", "Codex finished its turn in shop")


def which(*present: str) -> Callable[[str], str | None]:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_a_desktop_is_told_where_there_is_one() -> None:
    assert desktop_command(ATTENTION, {"DISPLAY": ":0"}, which("notify-send"), "linux") == [
        "/usr/bin/notify-send", "--app-name=opencode-sandbox", "Codex is done", "Codex finished its turn in shop"]
    assert desktop_command(ATTENTION, {"WAYLAND_DISPLAY": "wayland-0"}, which("notify-send"), "linux") is not None
    assert desktop_command(ATTENTION, {}, which("notify-send"), "linux") is None, "no session to show it in"
    assert desktop_command(ATTENTION, {"DISPLAY": ":0"}, which(), "linux") is None
    mac = desktop_command(ATTENTION, {}, which("osascript"), "darwin")
    assert mac is not None and mac[0] == "/usr/bin/osascript"
    assert mac[-2:] == ["Codex finished its turn in shop", "Codex is done"], "the words are arguments, not script"


def test_one_client_claims_each_event(tmp_path: Path) -> None:
    layout = ProjectLayout(tmp_path)
    assert claim(layout, "e1") is True
    assert claim(layout, "e1") is False
    assert claim(layout, "e2") is True


def test_of_two_attached_clients_one_rings_for_each_new_event(tmp_path: Path) -> None:
    layout = ProjectLayout(tmp_path)
    layout.attention.write_text("old\n")
    rings: list[str] = []
    lock = threading.Lock()

    def ringer(name: str) -> Callable[[], None]:
        def ring() -> None:
            with lock:
                rings.append(name)
        return ring

    with BellRinger(layout, ringer("first"), poll_s=0.02), BellRinger(layout, ringer("second"), poll_s=0.02):
        time.sleep(0.2)
        assert rings == [], "an event from before a client attached is not its to ring"
        layout.attention.write_text("new\n")
        deadline = time.monotonic() + 5
        while not rings and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
    assert len(rings) == 1, rings


def reaper_settings(tmp_path: Path, agent: str = "codex", notify: bool = True) -> ReaperSettings:
    return ReaperSettings(SLUG, VM, RuntimeKind.DOCKER, "http://127.0.0.1:1", 10.0,
                          StopMode.WAIT_FOR_QUIESCENCE, 10, tmp_path, project_root="/home/u/shop", agent=agent,
                          notify=notify)


def running_vm() -> FakeRuntime:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    image = runner_image(SLUG, "0" * 12)
    runtime.add_docker_image(image)
    runtime.create_sandbox(SandboxSpec(VM, image, 1, 512, labels=managed_labels(SLUG)))
    return runtime


def test_the_watch_signals_a_terminal_agents_turn_end_once(tmp_path: Path) -> None:
    runtime = running_vm()
    guests, commands, logged = runtime.guests, [], []
    watch = AttentionWatch(lambda kind: runtime, lambda settings: DaemonActivity({}), logged.append, guests=guests,
                           run=commands.append, environ={"DISPLAY": ":0"})
    settings = reaper_settings(tmp_path)
    for report in (AgentReport(True, AgentState.BUSY, 1), AgentReport(True, AgentState.WAITING, 2),
                   AgentReport(True, AgentState.WAITING, 2)):
        guests.agent_reports[VM] = report
        watch(settings)
    layout = ProjectLayout(tmp_path / SLUG)
    if commands:  # notify-send is on this host's PATH
        assert len(commands) == 1 and "Codex finished its turn in shop" in commands[0]
    else:
        assert layout.attention.read_text().strip() and len(logged) == 1, logged
    assert len(logged) == 1 and "Codex finished its turn in shop" in logged[0]


def test_the_watch_is_quiet_when_notify_is_off(tmp_path: Path) -> None:
    runtime = running_vm()
    guests, commands, logged = runtime.guests, [], []
    watch = AttentionWatch(lambda kind: runtime, lambda settings: DaemonActivity({}), logged.append, guests=guests,
                           run=commands.append)
    settings = reaper_settings(tmp_path, notify=False)
    for report in (AgentReport(True, AgentState.BUSY, 1), AgentReport(True, AgentState.WAITING, 2)):
        guests.agent_reports[VM] = report
        watch(settings)
    assert commands == [] and logged == [] and not ProjectLayout(tmp_path / SLUG).attention.exists()


def test_the_signal_names_an_agent_of_the_users_own_by_the_title_the_start_recorded(tmp_path: Path) -> None:
    """The reaper reads no configuration: the title of the user's agent comes with its settings, and
    an agent of the user's own has no hooks, so its terminal tells when its turn ends."""
    runtime = running_vm()
    guests, logged = runtime.guests, []
    watch = AttentionWatch(lambda kind: runtime, lambda settings: DaemonActivity({}), logged.append, guests=guests,
                           run=lambda command: None, environ={})
    settings = reaper_settings(tmp_path, agent="grok-of-mine")._replace(agent_title="Grok CLI")
    quiet = QUIET_AFTER_S + 1
    for report in (AgentReport(True, quiet_s=0, keys_s=30, printed_at_s=1000),  # its spinner, on its own
                   AgentReport(True, quiet_s=0, keys_s=32, printed_at_s=1002),
                   AgentReport(True, quiet_s=quiet, keys_s=45, printed_at_s=1002)):
        guests.agent_reports[VM] = report
        watch(settings)
    assert len(logged) == 1 and "Grok CLI finished its turn in shop" in logged[0], logged


def test_for_an_agent_without_hooks_the_watch_signals_once_when_its_terminal_falls_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hookless = agents.PROFILES["codex"]._replace(activity=ActivitySource.TERMINAL)
    monkeypatch.setattr(agents, "PROFILES", {**agents.PROFILES, "codex": hookless})
    runtime = running_vm()
    guests, commands, logged = runtime.guests, [], []
    watch = AttentionWatch(lambda kind: runtime, lambda settings: DaemonActivity({}), logged.append, guests=guests,
                           run=commands.append, environ={"DISPLAY": ":0"})
    settings = reaper_settings(tmp_path)
    quiet = QUIET_AFTER_S + 1
    for report in (AgentReport(True, AgentState.WAITING, 1, quiet, 60, 940),  # the hooks' file is not read
                   AgentReport(True, quiet_s=0, keys_s=30, printed_at_s=1000),  # its spinner
                   AgentReport(True, quiet_s=0, keys_s=32, printed_at_s=1002),
                   AgentReport(True, quiet_s=0, keys_s=0, printed_at_s=1004),  # a client attached
                   AgentReport(True, AgentState.BUSY, 2, quiet, 60, 1004),
                   AgentReport(True, quiet_s=quiet + 5, keys_s=65, printed_at_s=1004)):
        guests.agent_reports[VM] = report
        watch(settings)
    assert len(logged) == 1 and "Codex finished its turn in shop" in logged[0], logged
