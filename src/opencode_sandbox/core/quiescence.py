"""Whether the project VM may be stopped, judged from what its opencode sessions are doing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from opencode_sandbox.core.records import Record
from opencode_sandbox.core.stop_mode import StopMode


class SessionActivity(StrEnum):
    IDLE = "idle"
    BUSY = "busy"
    RETRY = "retry"
    UNKNOWN = "unknown"
    """An answer of a shape this tool does not know: treated as busy."""


class SessionState(Record):
    activity: SessionActivity
    attempt: int = 0
    """How often a retrying session has retried so far."""
    detail: str = ""
    """The daemon's message for a retry, or the unknown answer as text."""

    @classmethod
    def idle(cls) -> SessionState:
        return cls(SessionActivity.IDLE)

    @classmethod
    def busy(cls) -> SessionState:
        return cls(SessionActivity.BUSY)

    @classmethod
    def retry(cls, attempt: int, detail: str = "") -> SessionState:
        return cls(SessionActivity.RETRY, attempt, detail)

    @classmethod
    def unknown(cls, detail: str) -> SessionState:
        return cls(SessionActivity.UNKNOWN, 0, detail)


class PendingQuestion(Record):
    id: str
    session_id: str


class DaemonActivity(Record):
    """Every session state (by session id) and every unanswered question the daemon reports."""

    sessions: Mapping[str, SessionState]
    questions: tuple[PendingQuestion, ...] = ()


UNREADABLE_GRACE_S = 60.0
"""How long an `opencode serve` that runs but cannot be read still holds the VM."""


class UnreadableApi(Record):
    """The daemon's API could not be read at the last poll."""

    reason: str
    serve_running: bool | None
    """Whether an `opencode serve` process runs in the VM; None when the VM could not be asked."""
    unreadable_for_s: float = 0.0
    """How long the API has been unreadable without a break: 0 at the first failed poll."""


class StopDecision(Record):
    stop: bool
    reason: str
    holding_sessions: tuple[str, ...] = ()
    """The ids of the sessions that keep the VM up, in a stable order."""


def decide_stop(
    activity: DaemonActivity | UnreadableApi,
    mode: StopMode,
    max_retries: int,
    grace_s: float = UNREADABLE_GRACE_S,
) -> StopDecision:
    """Stop or hold, once the idle timeout has run out with no client attached.

    An API that cannot be read holds the VM only while `opencode serve` runs, and for at most
    `grace_s`: no process means no session can be working, and a process that never answers
    cannot show any work either.
    """
    if mode is StopMode.STOP_IMMEDIATELY:
        return StopDecision(True, "stop-immediately mode: sessions are not waited for")
    if isinstance(activity, UnreadableApi):
        return _decide_unreadable(activity, grace_s)
    waiting = _sessions_with_questions(activity.questions)
    holding: list[str] = []
    reasons: list[str] = []
    for session_id in sorted(activity.sessions):
        reason = _holding_reason(activity.sessions[session_id], session_id in waiting, max_retries)
        if reason is not None:
            holding.append(session_id)
            reasons.append(f"{session_id} {reason}")
    if holding:
        return StopDecision(False, "sessions still working: " + "; ".join(reasons), tuple(holding))
    return StopDecision(True, _quiet_summary(activity, waiting, max_retries))


def _decide_unreadable(unreadable: UnreadableApi, grace_s: float) -> StopDecision:
    why = unreadable.reason or "no answer"
    if unreadable.serve_running is False:
        return StopDecision(True, f"opencode serve is not running in the VM ({why}); no session can be working")
    if unreadable.unreadable_for_s >= grace_s:
        return StopDecision(True, f"the opencode API has not been readable for {grace_s:g}s ({why})")
    return StopDecision(False, f"the opencode API cannot be read ({why}); holding the VM for at most {grace_s:g}s")


def _sessions_with_questions(questions: Iterable[PendingQuestion]) -> set[str]:
    return {question.session_id for question in questions}


def _holding_reason(state: SessionState, has_question: bool, max_retries: int) -> str | None:
    """Why this session keeps the VM up, None when it does not."""
    if state.activity is SessionActivity.IDLE or has_question:
        return None
    if state.activity is SessionActivity.RETRY:
        if state.attempt > max_retries:
            return None
        return f"is retrying (attempt {state.attempt} of at most {max_retries})"
    if state.activity is SessionActivity.UNKNOWN:
        return f"is in an unknown state ({state.detail}), counted as busy"
    return "is busy"


def _quiet_summary(activity: DaemonActivity, waiting: set[str], max_retries: int) -> str:
    asking = [sid for sid, state in activity.sessions.items()
              if state.activity is not SessionActivity.IDLE and sid in waiting]
    stuck = [sid for sid, state in activity.sessions.items()
             if sid not in waiting and state.activity is SessionActivity.RETRY and state.attempt > max_retries]
    parts = ["all sessions are quiet"]
    if asking:
        parts.append(f"waiting for an answer: {', '.join(sorted(asking))}")
    if stuck:
        parts.append(f"retried more than {max_retries} times: {', '.join(sorted(stuck))}")
    return "; ".join(parts)
