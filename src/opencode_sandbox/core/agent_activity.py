"""What a terminal agent is doing, read from the VM: whether its terminal session runs, and the last
state its hooks recorded (`core/agents/profile.ACTIVITY_FILE`). The VM writes that file, so every
line of it is read as untrusted text.
"""

from __future__ import annotations

import re
from enum import StrEnum

from opencode_sandbox.core.quiescence import DaemonActivity, PendingQuestion, SessionState
from opencode_sandbox.core.records import Record

SESSION_LINE = "session"
"""The report's first line when the agent's terminal session runs (`none` when it does not)."""


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


def parse_report(output: str) -> AgentReport:
    """The report `guest/shell.py` prints: `session` or `none`, then the activity file's line."""
    lines = output.splitlines()
    running = bool(lines) and lines[0].strip() == SESSION_LINE
    words = lines[1].split() if len(lines) > 1 else []
    if len(words) != 2 or not re.fullmatch(r"[0-9]{1,19}", words[1]):  # ASCII digits: `int` takes others too
        return AgentReport(running)
    try:
        state = AgentState(words[0])
    except ValueError:
        return AgentReport(running)
    return AgentReport(running, state, int(words[1]))


SESSION_ID = "agent"


def as_activity(report: AgentReport) -> DaemonActivity:
    """The agent's session as the stop decision reads opencode's: busy in a turn, asking with a
    question pending, idle otherwise. A session that no longer runs does nothing."""
    if not report.session_running or report.state is None:
        return DaemonActivity({})
    if report.state is AgentState.BUSY:
        return DaemonActivity({SESSION_ID: SessionState.busy()})
    if report.state is AgentState.ASKING:
        return DaemonActivity({SESSION_ID: SessionState.busy()},
                              (PendingQuestion(f"{SESSION_ID}-{report.at_ns}", SESSION_ID),))
    return DaemonActivity({SESSION_ID: SessionState.idle()})
