"""An agent without hooks: its terminal's output tells a turn in progress from a quiet agent, and
the end of a turn is signalled once."""

from __future__ import annotations

from opencode_sandbox.core.agent_activity import AgentReport, AgentState
from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.attention import agent_attention
from opencode_sandbox.core.terminal_activity import ECHO_S, QUIET_AFTER_S, printing, with_output_state

KEY = 1000
"""When the user pressed Enter (or the session started), on the VM's clock."""


def at(now: int, printed: int, key: int = KEY) -> AgentReport:
    """The report read at `now` of a session that last printed at `printed`."""
    return AgentReport(True, quiet_s=now - printed, keys_s=now - key, printed_at_s=printed)


def spinning(start: int, end: int) -> list[AgentReport]:
    """Reports every 2 s of an agent that prints all along."""
    return [at(now, now) for now in range(start, end, 2)]


def quiet(start: int, end: int, printed: int, key: int = KEY) -> list[AgentReport]:
    return [at(now, printed, key) for now in range(start, end, 2)]


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


def test_output_within_the_window_holds_the_vm() -> None:
    assert printing(at(1100, 1100)) and printing(at(1100, 1100 - QUIET_AFTER_S + 1))
    assert not printing(at(1100, 1100 - QUIET_AFTER_S))
    assert not printing(AgentReport(False, quiet_s=0, keys_s=9, printed_at_s=1))
    assert not printing(AgentReport(True))


def test_a_spinner_is_a_turn_and_silence_past_the_window_is_its_end() -> None:
    turn = spinning(1010, 1030)
    seen = states(*turn, *quiet(1030, 1050, 1029))
    assert seen[0] == AgentState.WAITING, "one look cannot tell a spinner from a notice drawn once"
    assert set(seen[1:len(turn)]) == {AgentState.BUSY}
    assert states(*turn, at(1038, 1029))[-1] == AgentState.BUSY, "within the window"
    assert states(*turn, at(1039, 1029))[-1] == AgentState.WAITING


def test_output_that_answers_the_users_keys_is_no_turn() -> None:
    typing = [at(now, now, key=now) for now in range(1010, 1030, 2)]
    assert set(states(*typing, *quiet(1030, 1050, 1028, key=1028))) == {AgentState.WAITING}
    echo = [at(now, now, key=now - ECHO_S + 1) for now in range(1010, 1030, 2)]
    assert set(states(*echo)) == {AgentState.WAITING}


def test_the_first_look_may_see_the_users_enter() -> None:
    enter = at(1010, 1010, key=1010)
    assert states(enter, at(1012, 1012, key=1010)) == [AgentState.WAITING, AgentState.BUSY]


def test_a_client_that_attaches_during_a_turn_keeps_it_busy() -> None:
    attach = at(1020, 1020, key=1020)
    assert states(*spinning(1010, 1020), attach, at(1022, 1022, key=1020))[-2:] == [AgentState.BUSY] * 2


def test_a_notice_drawn_once_or_twice_is_no_turn() -> None:
    """Claude Code shows a notice 11 s after it starts and takes it away 8 s later."""
    notices = [*quiet(1004, 1012, 1000), *quiet(1012, 1019, 1011), *quiet(1019, 1040, 1019)]
    assert set(states(*notices)) == {AgentState.WAITING}
    assert signals(*notices) == 0


def test_the_hooks_file_is_not_read_and_no_session_has_no_state() -> None:
    assert states(at(1100, 1000)._replace(state=AgentState.BUSY, at_ns=7)) == [AgentState.WAITING]
    assert states(AgentReport(False, AgentState.BUSY, 7, 0, 99, 1000)) == [None]
    assert states(AgentReport(True, AgentState.BUSY, 7)) == [None]


def test_a_turns_end_is_signalled_once() -> None:
    attach = at(1020, 1020, key=1020)
    assert signals(*spinning(1010, 1020), attach, *spinning(1022, 1030), *quiet(1030, 1060, 1029)) == 1
    second = [at(now, now, key=1060) for now in range(1064, 1080, 2)]
    assert signals(*spinning(1010, 1030), *quiet(1030, 1060, 1029), *second, *quiet(1080, 1100, 1078)) == 2


def test_no_signal_without_a_turn() -> None:
    assert signals(*quiet(1010, 1020, 1001)) == 0
    assert signals(at(1010, 1010), *quiet(1012, 1040, 1010)) == 0, "output seen by one look alone"
    assert signals(AgentReport(False), *quiet(1010, 1020, 1001)) == 0, "a session that starts"
    assert signals(*spinning(1010, 1030), AgentReport(False)) == 0, "a session that ended"


def test_the_signal_names_the_turns_end_never_a_question() -> None:
    before = with_output_state(with_output_state(None, at(1010, 1010)), at(1012, 1012))
    attention = agent_attention(before, with_output_state(before, at(1030, 1012)), "Gemini CLI", "shop",
                                ActivitySource.TERMINAL)
    assert attention is not None and attention.title == "Gemini CLI is done"
