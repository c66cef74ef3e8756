"""The stop decision over every combination of session states, questions and modes."""

from __future__ import annotations

import itertools

import pytest

from opencode_sandbox.core.quiescence import (
    UNREADABLE_GRACE_S,
    DaemonActivity,
    PendingQuestion,
    SessionActivity,
    SessionState,
    UnreadableApi,
    decide_stop,
)
from opencode_sandbox.core.stop_mode import StopMode

MAX_RETRIES = 3

# one session: (state, has a pending question) -> does it hold the VM in wait mode?
SINGLE_SESSION_TABLE = [
    (SessionState.idle(), False, False),
    (SessionState.idle(), True, False),
    (SessionState.busy(), False, True),
    (SessionState.busy(), True, False),
    (SessionState.retry(0), False, True),
    (SessionState.retry(1), False, True),
    (SessionState.retry(MAX_RETRIES), False, True),
    (SessionState.retry(MAX_RETRIES + 1), False, False),
    (SessionState.retry(MAX_RETRIES + 50), False, False),
    (SessionState.retry(1), True, False),
    (SessionState.unknown('{"type": "thinking"}'), False, True),
    (SessionState.unknown('"busy"'), True, False),
]

STATES = [
    SessionState.idle(),
    SessionState.busy(),
    SessionState.retry(1),
    SessionState.retry(MAX_RETRIES + 1),
    SessionState.unknown("{}"),
]


def activity(states: dict[str, SessionState], asking: tuple[str, ...] = ()) -> DaemonActivity:
    questions = tuple(PendingQuestion(f"que_{index}", session) for index, session in enumerate(asking))
    return DaemonActivity(states, questions)


@pytest.mark.parametrize(("state", "asking", "holds"), SINGLE_SESSION_TABLE)
def test_one_session_in_wait_mode(state: SessionState, asking: bool, holds: bool) -> None:
    decision = decide_stop(
        activity({"ses_1": state}, ("ses_1",) if asking else ()), StopMode.WAIT_FOR_QUIESCENCE, MAX_RETRIES
    )
    assert decision.stop is not holds
    assert decision.holding_sessions == (("ses_1",) if holds else ())


@pytest.mark.parametrize(("state", "asking", "holds"), SINGLE_SESSION_TABLE)
def test_one_session_in_stop_immediately_mode_never_holds(state: SessionState, asking: bool, holds: bool) -> None:
    decision = decide_stop(
        activity({"ses_1": state}, ("ses_1",) if asking else ()), StopMode.STOP_IMMEDIATELY, MAX_RETRIES
    )
    assert decision.stop is True
    assert decision.holding_sessions == ()


def _holds_alone(state: SessionState, asking: bool) -> bool:
    """The rule, written once more as the spec phrases it, to check every combination against."""
    if asking or state.activity is SessionActivity.IDLE:
        return False
    return not (state.activity is SessionActivity.RETRY and state.attempt > MAX_RETRIES)


@pytest.mark.parametrize("mode", list(StopMode))
def test_every_combination_of_three_sessions(mode: StopMode) -> None:
    ids = ("ses_a", "ses_b", "ses_c")
    checked = 0
    for states in itertools.product(STATES, repeat=len(ids)):
        for asking_flags in itertools.product((False, True), repeat=len(ids)):
            asking = tuple(sid for sid, flag in zip(ids, asking_flags, strict=True) if flag)
            decision = decide_stop(activity(dict(zip(ids, states, strict=True)), asking), mode, MAX_RETRIES)
            expected_holding = tuple(
                sid for sid, state, flag in zip(ids, states, asking_flags, strict=True) if _holds_alone(state, flag)
            )
            if mode is StopMode.STOP_IMMEDIATELY:
                assert decision.stop is True
                continue
            assert decision.holding_sessions == expected_holding, (states, asking)
            assert decision.stop is (not expected_holding)
            checked += 1
    assert checked == (0 if mode is StopMode.STOP_IMMEDIATELY else len(STATES) ** 3 * 8)


def test_no_sessions_at_all_allows_the_stop() -> None:
    decision = decide_stop(activity({}), StopMode.WAIT_FOR_QUIESCENCE, MAX_RETRIES)
    assert decision.stop is True
    assert decision.reason == "all sessions are quiet"


def test_a_question_of_another_session_does_not_release_a_busy_one() -> None:
    decision = decide_stop(
        activity({"ses_1": SessionState.busy(), "ses_2": SessionState.idle()}, ("ses_2",)),
        StopMode.WAIT_FOR_QUIESCENCE,
        MAX_RETRIES,
    )
    assert decision.stop is False
    assert decision.holding_sessions == ("ses_1",)


# an unreadable API: (is opencode serve running?, unreadable for s) -> stop?, reason
GRACE_S = 60.0
UNREADABLE_TABLE = [
    (False, 0.0, True, "opencode serve is not running in the VM (connection refused); no session can be working"),
    (False, 30.0, True, "opencode serve is not running in the VM (connection refused); no session can be working"),
    (True, 0.0, False, "the opencode API cannot be read (connection refused); holding the VM for at most 60s"),
    (True, GRACE_S - 0.1, False,
     "the opencode API cannot be read (connection refused); holding the VM for at most 60s"),
    (True, GRACE_S, True, "the opencode API has not been readable for 60s (connection refused)"),
    (True, GRACE_S * 10, True, "the opencode API has not been readable for 60s (connection refused)"),
    (None, 0.0, False, "the opencode API cannot be read (connection refused); holding the VM for at most 60s"),
    (None, GRACE_S, True, "the opencode API has not been readable for 60s (connection refused)"),
]


@pytest.mark.parametrize(("running", "unreadable_for", "stop", "reason"), UNREADABLE_TABLE)
def test_an_unreadable_api_in_wait_mode(running: bool | None, unreadable_for: float, stop: bool, reason: str) -> None:
    unreadable = UnreadableApi("connection refused", running, unreadable_for)
    decision = decide_stop(unreadable, StopMode.WAIT_FOR_QUIESCENCE, MAX_RETRIES, GRACE_S)
    assert decision.stop is stop
    assert decision.reason == reason
    assert decision.holding_sessions == ()


def test_the_grace_of_an_unreadable_api_defaults_to_a_minute() -> None:
    assert UNREADABLE_GRACE_S == 60.0
    unreadable = UnreadableApi("timed out", True, 59.0)
    assert decide_stop(unreadable, StopMode.WAIT_FOR_QUIESCENCE, MAX_RETRIES).stop is False
    expired = UnreadableApi("timed out", True, 60.0)
    assert decide_stop(expired, StopMode.WAIT_FOR_QUIESCENCE, MAX_RETRIES).stop is True


@pytest.mark.parametrize(("running", "unreadable_for", "stop", "reason"), UNREADABLE_TABLE)
def test_an_unreadable_api_does_not_hold_in_stop_immediately_mode(
    running: bool | None, unreadable_for: float, stop: bool, reason: str
) -> None:
    decision = decide_stop(UnreadableApi("connection refused", running, unreadable_for), StopMode.STOP_IMMEDIATELY,
                           MAX_RETRIES, GRACE_S)
    assert decision.stop is True
    assert "stop-immediately" in decision.reason


def test_reasons_name_each_holding_session() -> None:
    decision = decide_stop(
        activity({
            "ses_b": SessionState.retry(2),
            "ses_a": SessionState.busy(),
            "ses_c": SessionState.unknown('{"type": "x"}'),
        }),
        StopMode.WAIT_FOR_QUIESCENCE,
        MAX_RETRIES,
    )
    assert decision.reason == (
        "sessions still working: ses_a is busy; ses_b is retrying (attempt 2 of at most 3); "
        'ses_c is in an unknown state ({"type": "x"}), counted as busy'
    )


def test_the_quiet_reason_names_waiting_and_stuck_sessions() -> None:
    decision = decide_stop(
        activity({"ses_q": SessionState.busy(), "ses_r": SessionState.retry(9)}, ("ses_q",)),
        StopMode.WAIT_FOR_QUIESCENCE,
        MAX_RETRIES,
    )
    assert decision.stop is True
    assert decision.reason == (
        "all sessions are quiet; waiting for an answer: ses_q; retried more than 3 times: ses_r"
    )


@pytest.mark.parametrize(
    ("setting", "mode"), [(False, StopMode.WAIT_FOR_QUIESCENCE), (True, StopMode.STOP_IMMEDIATELY)]
)
def test_the_mode_follows_the_setting(setting: bool, mode: StopMode) -> None:
    assert StopMode.from_setting(setting) is mode


def test_zero_max_retries_releases_a_session_after_its_first_retry() -> None:
    states = {"ses_1": SessionState.retry(0), "ses_2": SessionState.retry(1)}
    decision = decide_stop(activity(states), StopMode.WAIT_FOR_QUIESCENCE, 0)
    assert decision.holding_sessions == ("ses_1",)
