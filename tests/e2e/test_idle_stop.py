"""Idle auto-stop, stop and kill, end to end on the docker runtime with the real opencode daemon."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest

from opencode_sandbox.core.quiescence import UNREADABLE_GRACE_S
from opencode_sandbox.daemon.client import DaemonClient
from tests.e2e.harness import Project, ServeOnly, Tmux, cli_command, docker, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def _quick_stop(project: Project, monkeypatch: pytest.MonkeyPatch, *, immediately: bool = False) -> None:
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", "2s")
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_ON_ACTIVE_SESSIONS", "true" if immediately else "false")


def _running(project: Project) -> bool:
    return project.container_state() == "running"


def test_busy_session_holds_the_vm_until_idle(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    _quick_stop(project, monkeypatch)
    client = ServeOnly(project)
    daemon = DaemonClient(client.url, client.password, timeout_s=120)
    session = daemon.create_session("busy")
    worker = threading.Thread(target=lambda: daemon.run_shell(session, "sleep 25", timeout_s=120), daemon=True)
    worker.start()
    assert wait_until(lambda: any(s.activity.value == "busy" for s in daemon.session_states().values()), 30)
    client.detach()
    time.sleep(10)
    assert _running(project), "a busy session must hold the VM in wait mode"
    worker.join(60)
    assert wait_until(lambda: project.container_state() == "exited", timeout=90)
    daemon.close()


@pytest.mark.parametrize(("number", "exit_code"), [
    (signal.SIGHUP, 128 + signal.SIGHUP), (signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL),
], ids=["terminal closed", "killed", "killed outright"])
def test_a_client_ended_by_a_closed_terminal_or_kill_leaves_the_vm_to_the_idle_stop(
        any_user_project: Project, number: signal.Signals, exit_code: int) -> None:
    project = any_user_project
    project.env.update(OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="2s", OPENCODE_SANDBOX_AUTO_STOP_ON_ACTIVE_SESSIONS="false")
    client = ServeOnly(project)
    if number == signal.SIGHUP:  # a closing terminal hangs up its whole foreground group
        os.killpg(client.process.pid, number)
    else:
        os.kill(client.process.pid, number)
    client.process.wait(60)
    assert wait_until(lambda: project.container_state() == "exited", timeout=90), \
        "the VM must stop by itself once its last client is gone"
    assert "stopping" in (project.state_dir / "reaper.log").read_text()
    assert client.process.returncode == exit_code


def _signal_serve(project: Project, name: str) -> None:
    sent = docker("exec", "--user", "dev", project.vm, "pkill", f"-{name}", "-f", "opencode serve --hostname")
    assert sent.returncode == 0, sent.stderr


def test_a_vm_whose_opencode_serve_died_stops_by_itself(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", "5s")
    client = ServeOnly(project)
    client.detach()
    _signal_serve(project, "KILL")
    assert wait_until(lambda: project.container_state() == "exited", timeout=5 + UNREADABLE_GRACE_S)
    log = (project.state_dir / "reaper.log").read_text()
    assert "opencode serve is not running in the VM" in log


def test_a_hung_opencode_serve_holds_the_vm_for_the_grace_only(project: Project,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    grace_s = UNREADABLE_GRACE_S + 15  # a daemon-start-timeout above the floor is the grace
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", "2s")
    monkeypatch.setenv("OPENCODE_SANDBOX_DAEMON_START_TIMEOUT", f"{grace_s:g}s")
    client = ServeOnly(project)
    _signal_serve(project, "STOP")  # the process stays, its API answers nothing
    detached = time.monotonic()
    client.detach()
    time.sleep(grace_s / 2)
    assert _running(project), "a running but silent opencode serve holds the VM during the grace"
    assert wait_until(lambda: project.container_state() == "exited", timeout=grace_s + 60)
    assert time.monotonic() - detached >= 2 + grace_s
    log = (project.state_dir / "reaper.log").read_text()
    assert f"the opencode API has not been readable for {grace_s:g}s" in log


def test_stop_immediately_mode_stops_despite_a_busy_session(project: Project,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _quick_stop(project, monkeypatch, immediately=True)
    client = ServeOnly(project)
    daemon = DaemonClient(client.url, client.password, timeout_s=120)
    session = daemon.create_session("busy")
    worker = threading.Thread(target=lambda: _ignore_errors(daemon, session), daemon=True)
    worker.start()
    assert wait_until(lambda: any(s.activity.value == "busy" for s in daemon.session_states().values()), 30)
    client.detach()
    assert wait_until(lambda: project.container_state() == "exited", timeout=40)


def _ignore_errors(daemon: DaemonClient, session: str) -> None:
    with contextlib.suppress(Exception):  # the VM is stopped under the running command
        daemon.run_shell(session, "sleep 60", timeout_s=120)


def test_second_client_keeps_it_up_and_reattaching_cancels_the_stop(project: Project,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", "6s")
    first = ServeOnly(project)
    second = ServeOnly(project)
    first.detach()
    time.sleep(10)
    assert _running(project), "the second client keeps the VM up"
    second.detach()
    time.sleep(2)
    third = ServeOnly(project)
    time.sleep(8)
    assert _running(project), "reattaching within the timeout cancels the pending stop"
    third.detach()
    assert wait_until(lambda: project.container_state() == "exited", timeout=90)


def test_stop_without_a_terminal_cuts_the_clients_off_and_says_how_many(project: Project) -> None:
    client = ServeOnly(project)
    try:
        result = project.cli("stop")  # standard input is not a terminal
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"Stopped {project.vm}. 1 attached client was cut off."
        assert project.container_state() == "exited"
    finally:
        client.detach()


def test_stop_on_a_terminal_names_the_clients_and_asks(project: Project, unique: str) -> None:
    client = ServeOnly(project)
    terminal = Tmux(f"osb-stop-{unique}", cli_command("stop"), project.root, project.env)
    try:
        screen = terminal.wait_for(r"Stop the VM anyway\? \[Y/n\]", timeout=60)
        assert f"1 client is attached to {project.vm}:" in screen
        assert f"pid {client.process.pid}: opencode-sandbox run --serve-only, attached" in screen
        terminal.send("n", "Enter")
        terminal.wait_for("EXIT-CODE=0", timeout=60)
        assert f"{project.vm} keeps running." in terminal.screen()
        assert _running(project)
    finally:
        terminal.close()
    agreed = Tmux(f"osb-stop-yes-{unique}", cli_command("stop"), project.root, project.env)
    try:
        agreed.wait_for(r"Stop the VM anyway\?", timeout=60)
        agreed.send("y", "Enter")
        screen = agreed.wait_for("EXIT-CODE=0", timeout=120)
        assert "1 attached client was cut off." in screen
        assert project.container_state() == "exited"
    finally:
        agreed.close()
        client.detach()


def test_kill_powers_off_at_once(project: Project) -> None:
    assert project.shell("true").returncode == 0
    result = project.cli("kill")
    assert result.returncode == 0, result.stderr
    assert f"Killed {project.vm}" in result.stdout
    assert project.container_state() == "exited"
    assert docker("inspect", "--format", "{{.State.ExitCode}}", project.vm).stdout.strip() in ("137", "143")
