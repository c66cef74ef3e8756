"""An agent without hooks: its terminal's output tells a turn in progress from a quiet agent, and
the end of a turn is signalled once."""

from __future__ import annotations

from opencode_sandbox.core.agent_activity import AgentReport, AgentState
from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.attention import agent_attention
from opencode_sandbox.core.terminal_activity import ECHO_S, QUIET_AFTER_S, with_output_state

WORKING = AgentReport(True, quiet_s=0, keys_s=40)
"""Its spinner printed a moment ago; the user's Enter was long before."""
QUIET = AgentReport(True, quiet_s=QUIET_AFTER_S + 5, keys_s=60)
TYPING = AgentReport(True, quiet_s=0, keys_s=0)
"""The user's keys, echoed."""


def states(*reports: AgentReport) -> list[AgentState | None]:
    before: AgentReport | None = None
    seen = []
    for report in reports:
        before = with_output_state(before, report)
        seen.append(before.state)
    return seen


def signals(*reports: AgentReport) -> int:
    before: AgentReport | None = None
    count = 0
    for report in reports:
        now = with_output_state(before, report)
        count += agent_attention(before, now, "Gemini CLI", "shop", ActivitySource.TERMINAL) is not None
        before = now
    return count


def test_output_of_its_own_is_a_turn_and_silence_past_the_window_is_its_end() -> None:
    assert states(WORKING, QUIET) == [AgentState.BUSY, AgentState.WAITING]
    assert states(AgentReport(True, quiet_s=QUIET_AFTER_S - 1, keys_s=90)) == [AgentState.BUSY]
    assert states(AgentReport(True, quiet_s=QUIET_AFTER_S, keys_s=90)) == [AgentState.WAITING]


def test_output_that_answers_the_users_keys_keeps_the_state_before() -> None:
    assert states(TYPING) == [AgentState.WAITING]
    assert states(QUIET, TYPING) == [AgentState.WAITING, AgentState.WAITING]
    assert states(WORKING, TYPING) == [AgentState.BUSY, AgentState.BUSY], "a client attached during the turn"
    echo = AgentReport(True, quiet_s=3, keys_s=3 + ECHO_S - 1)
    assert states(QUIET, echo) == [AgentState.WAITING, AgentState.WAITING]
    later = AgentReport(True, quiet_s=3, keys_s=3 + ECHO_S)
    assert states(QUIET, later) == [AgentState.WAITING, AgentState.BUSY]


def test_the_hooks_file_is_not_read_and_no_session_has_no_state() -> None:
    assert states(AgentReport(True, AgentState.BUSY, 7, QUIET_AFTER_S + 1, 99)) == [AgentState.WAITING]
    assert states(AgentReport(False, AgentState.BUSY, 7, 0, 99)) == [None]
    assert states(AgentReport(True, AgentState.BUSY, 7)) == [None]


def test_a_turns_end_is_signalled_once() -> None:
    assert signals(QUIET, WORKING, WORKING, TYPING, WORKING, QUIET, QUIET, QUIET) == 1
    assert signals(QUIET, WORKING, QUIET, WORKING, QUIET) == 2, "two turns, two signals"


def test_no_signal_without_a_turn() -> None:
    assert signals(WORKING) == 0, "the first reading only sets the baseline"
    assert signals(QUIET, TYPING, TYPING, QUIET, QUIET) == 0, "the user typed, then paused"
    assert signals(AgentReport(False), QUIET) == 0, "a session that starts"
    assert signals(QUIET, WORKING, AgentReport(False)) == 0, "a session that ended"


def test_the_signal_names_the_turns_end_never_a_question() -> None:
    attention = agent_attention(with_output_state(None, WORKING), with_output_state(None, QUIET), "Gemini CLI",
                                "shop", ActivitySource.TERMINAL)
    assert attention is not None and attention.title == "Gemini CLI is done"
