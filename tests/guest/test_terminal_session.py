"""The agent's terminal session: the command that attaches to it, and the screen an agent that
ended at once leaves behind."""

from __future__ import annotations

import subprocess

from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.guest.terminal_session import attach_command


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
