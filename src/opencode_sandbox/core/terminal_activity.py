"""What an agent without hooks (`ActivitySource.TERMINAL`) is doing, told by its terminal session's
output: a working agent's interface prints all along its turn (its spinner, its elapsed time), and
one that waits for the user prints nothing. The figures behind the spans are in docs/agents.md.
"""

from __future__ import annotations

from opencode_sandbox.core.agent_activity import AgentReport, AgentState

QUIET_AFTER_S = 10
"""A session that printed within this span works; one quiet for longer waits for the user."""
ECHO_S = 2
"""Output this soon after a key, an attach or the session's start is the terminal answering the user
(their typing echoed, the screen drawn for a new client, the agent's first screen), not a turn."""
FRESH_S = 1
"""Output at most this old when a report is read is still going on: a spinner's frames come many
times a second, and the VM counts whole seconds."""


def printing(report: AgentReport) -> bool:
    """The session runs and printed within `QUIET_AFTER_S`: what holds the VM."""
    return report.session_running and report.quiet_s is not None and report.quiet_s < QUIET_AFTER_S


def with_output_state(before: AgentReport | None, now: AgentReport) -> AgentReport:
    """`now` with the state its output tells, for the signal when the agent needs the user, from two
    reports a few seconds apart: busy once output is fresh in both, newer in the second (a spinner,
    not a notice drawn once), and in the second answers no key of the user's (the first may be their
    Enter); waiting once it has been quiet for `QUIET_AFTER_S`; anything else keeps the state
    `before` (waiting when there is none). The hooks' state, if any, is dropped."""
    kept = before.state if before is not None and before.state is not None else AgentState.WAITING
    state: AgentState | None
    if not now.session_running or now.quiet_s is None:
        state = None
    elif not printing(now):
        state = AgentState.WAITING
    elif before is not None and _fresh(before) and _on_its_own(now) and now.printed_at_s > before.printed_at_s:
        state = AgentState.BUSY
    else:
        state = kept
    return now._replace(state=state, at_ns=0)


def _fresh(report: AgentReport) -> bool:
    return report.quiet_s is not None and report.quiet_s <= FRESH_S


def _on_its_own(report: AgentReport) -> bool:
    """Fresh output that answers no key of the user's."""
    return _fresh(report) and report.keys_s is not None and report.keys_s - (report.quiet_s or 0) >= ECHO_S
