"""What a terminal agent is doing, read from the VM: whether its terminal session runs, how long ago
the session last printed and a client last pressed a key in it, and the last state its hooks
recorded (`core/agents/profile.ACTIVITY_FILE`). The VM writes all of it, so every line is read as
untrusted text.
"""

from __future__ import annotations

import re
from enum import StrEnum

from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.quiescence import DaemonActivity, PendingQuestion, SessionState
from opencode_sandbox.core.records import Record

SESSION_LINE = "session"
"""The first word of the report's first line when the agent's terminal session runs (`none` when it
does not); the VM's clock follows (seconds since the epoch): now, when the session last printed,
when a client last pressed a key in it or attached."""
_SECONDS = re.compile(r"[0-9]{1,12}")
"""ASCII digits only: `int` takes others too."""


class AgentState(StrEnum):
    BUSY = "busy"
    """In the middle of a turn."""
    WAITING = "waiting"
    """A turn ended: the agent waits for the user."""
    ASKING = "asking"
    """The agent asks the user a question or a permission."""
    IDLE = "idle"
    """A session started and no turn yet."""
    ENDED = "ended"


NEEDS_YOU = (AgentState.WAITING, AgentState.ASKING)
"""The states the user hears about."""


class AgentReport(Record):
    session_running: bool
    state: AgentState | None = None
    """None before any hook ran, or when the file holds something else."""
    at_ns: int = 0
    """When the hook recorded `state`, in the VM's clock (ns since the epoch): what tells one event from the next."""
    quiet_s: int | None = None
    """Seconds since the session's terminal last printed; None when the VM does not tell."""
    keys_s: int | None = None
    """Seconds since a client last pressed a key in the session or attached to it; None when the VM does not tell."""
    printed_at_s: int = 0
    """When the session last printed, in the VM's clock (s since the epoch): what tells new output
    from the output an earlier report saw."""


def parse_report(output: str) -> AgentReport:
    """The report `guest/terminal_session.report_script` prints: `session NOW OUTPUT KEY` or `none`,
    then the activity file's line."""
    lines = output.splitlines()
    first = lines[0].split() if lines else []
    running = first[:1] == [SESSION_LINE]
    session = _terminal(running, first[1:])
    words = lines[1].split() if len(lines) > 1 else []
    if len(words) != 2 or not re.fullmatch(r"[0-9]{1,19}", words[1]):  # ASCII digits: `int` takes others too
        return session
    try:
        state = AgentState(words[0])
    except ValueError:
        return session
    return session._replace(state=state, at_ns=int(words[1]))


def _terminal(running: bool, words: list[str]) -> AgentReport:
    """The session's times, as spans: a clock that went back makes them zero, never negative."""
    if not running or len(words) != 3 or not all(_SECONDS.fullmatch(word) for word in words):
        return AgentReport(running)
    now, printed, key = (int(word) for word in words)
    return AgentReport(running, quiet_s=max(0, now - printed), keys_s=max(0, now - key), printed_at_s=printed)


SESSION_ID = "agent"


def as_activity(report: AgentReport, source: ActivitySource) -> DaemonActivity:
    """The agent's session as the stop decision reads opencode's: busy in a turn, asking with a
    question pending, idle otherwise; told by its hooks, or by its terminal's output for an agent
    without them (`core/terminal_activity.py`). A session that no longer runs does nothing."""
    if source is ActivitySource.TERMINAL:
        from opencode_sandbox.core.terminal_activity import printing

        if not report.session_running or report.quiet_s is None:
            return DaemonActivity({})
        return DaemonActivity({SESSION_ID: SessionState.busy() if printing(report) else SessionState.idle()})
    if not report.session_running or report.state is None:
        return DaemonActivity({})
    if report.state is AgentState.BUSY:
        return DaemonActivity({SESSION_ID: SessionState.busy()})
    if report.state is AgentState.ASKING:
        return DaemonActivity({SESSION_ID: SessionState.busy()},
                              (PendingQuestion(f"{SESSION_ID}-{report.at_ns}", SESSION_ID),))
    return DaemonActivity({SESSION_ID: SessionState.idle()})
