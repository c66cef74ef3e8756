"""The agent's terminal session: the command that attaches to it, the screen an agent that ended at
once leaves behind, and the early start and end of a session on a real tmux."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.guest.terminal_session import (
    CONFIG,
    SESSION_ID,
    WORKSPACE,
    attach_command,
    end_unwatched_command,
    start_command,
)


def test_a_run_attaches_to_the_one_session_or_starts_it_with_the_users_arguments() -> None:
    command = attach_command(profile_of("codex"), ["--model", "o4"])
    assert command[:9] == ["tmux", "-u", "-f", "/etc/opencode-sandbox/tmux.conf", "new-session", "-A", "-s",
                           "agent", "-c"]
    assert command[-5:] == ["codex", "--sandbox", "danger-full-access", "--model", "o4"]


def run_as_the_session(agent: list[str]) -> subprocess.CompletedProcess[str]:
    """The session's command on this host's `sh`, the agent replaced by `agent`, Enter pressed once."""
    command = attach_command(profile_of("claude-code"), [])
    wrapper = command[command.index("sh"):command.index("claude")]
    return subprocess.run([*wrapper, *agent], input="\n", capture_output=True, text=True, timeout=30, check=False)


def test_an_agent_that_fails_keeps_its_message_on_screen_until_enter() -> None:
    ended = run_as_the_session(["sh", "-c", "echo cannot reach the provider; exit 3"])
    assert ended.returncode == 3
    assert ended.stdout.splitlines()[0] == "cannot reach the provider"
    assert "Claude Code ended (exit status 3). Press Enter to close its session." in ended.stdout


def test_an_agent_that_worked_and_was_quit_closes_its_session_at_once() -> None:
    quit_later = run_as_the_session(["sh", "-c", "sleep 11; echo bye"])
    assert quit_later.returncode == 0 and quit_later.stdout == "bye\n"


class HostTmux:
    """The session commands on this host's tmux, on a server of the test's own, the agent replaced
    by a long sleep and the image's configuration and checkout by the test's."""

    def __init__(self, folder: Path) -> None:
        self.env = {**os.environ, "TMUX_TMPDIR": str(folder)}
        self.env.pop("TMUX", None)
        self.folder = folder

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.folder, timeout=30,
                              check=False)

    def start(self) -> subprocess.CompletedProcess[str]:
        command = start_command(profile_of("claude-code"), [], 100, 30)
        command[command.index(CONFIG)] = "/dev/null"
        command[command.index(WORKSPACE)] = str(self.folder)
        return self.run([*command[:command.index("claude")], "sleep", "60"])

    def sessions(self) -> list[str]:
        listed = self.run(["tmux", "list-sessions", "-F", "#{session_id} #{window_width}x#{window_height}"])
        return listed.stdout.split("\n")[:-1]

    def wait_for_clients(self, session_id: str, count: int, failure: str) -> None:
        """Until `count` clients are attached to the session; `failure` after 20 s."""
        deadline = time.monotonic() + 20
        while self.run(["tmux", "display-message", "-p", "-t", session_id,
                        "#{session_attached}"]).stdout.strip() != str(count):
            assert time.monotonic() < deadline, failure
            time.sleep(0.05)

    def kill_server(self) -> None:
        self.run(["tmux", "kill-server"])


@pytest.fixture
def host_tmux(tmp_path: Path) -> Iterator[HostTmux]:
    tmux = HostTmux(tmp_path)
    yield tmux
    tmux.kill_server()


def test_an_early_start_prints_the_sessions_id_and_a_second_one_is_refused(host_tmux: HostTmux) -> None:
    started = host_tmux.start()
    assert started.returncode == 0, started.stderr
    assert SESSION_ID.fullmatch(started.stdout.strip())
    assert host_tmux.sessions() == [f"{started.stdout.strip()} 100x30"]
    again = host_tmux.start()
    assert again.returncode == 1 and "duplicate session" in again.stderr
    assert len(host_tmux.sessions()) == 1


def test_an_unwatched_session_ends_and_one_a_client_watches_stays(host_tmux: HostTmux) -> None:
    session_id = host_tmux.start().stdout.strip()
    watcher = subprocess.Popen(["script", "-qfc", f"tmux attach -t '{session_id}'", "/dev/null"], env=host_tmux.env,
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        host_tmux.wait_for_clients(session_id, 1, "the client did not attach")
        assert host_tmux.run(end_unwatched_command(session_id)).returncode == 0
        assert len(host_tmux.sessions()) == 1
    finally:
        watcher.kill()
        watcher.wait()
    host_tmux.wait_for_clients(session_id, 0, "the client did not leave")
    assert host_tmux.run(end_unwatched_command(session_id)).returncode == 0
    assert host_tmux.sessions() == []
