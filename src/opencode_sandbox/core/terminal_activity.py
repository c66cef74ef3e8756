"""What an agent without hooks (`ActivitySource.TERMINAL`) is doing, told by its terminal session's
output: a working agent's interface prints all along its turn (its spinner, its elapsed time), and
one that waits for the user prints nothing. The figures behind the two spans are in docs/agents.md.
"""

from __future__ import annotations

from opencode_sandbox.core.agent_activity import AgentReport, AgentState

QUIET_AFTER_S = 10
"""A session that printed within this span works; one quiet for longer waits for the user."""
ECHO_S = 2
"""Output this soon after a key or an attach is the terminal answering the user (their typing
echoed, the screen drawn again for a new client), not the agent working on its own."""


def printing(report: AgentReport) -> bool:
    """The session runs and printed within `QUIET_AFTER_S`: what holds the VM."""
    return report.session_running and report.quiet_s is not None and report.quiet_s < QUIET_AFTER_S


def with_output_state(before: AgentReport | None, now: AgentReport) -> AgentReport:
    """`now` with the state its output tells, for the signal when the agent needs the user: busy
    while the agent prints on its own, waiting once it is quiet; output that answers the user's keys
    keeps the state `before` (waiting when there is none). The hooks' own state, if any, is dropped."""
    state: AgentState | None
    if not now.session_running or now.quiet_s is None:
        state = None
    elif not printing(now):
        state = AgentState.WAITING
    elif now.keys_s is None or now.keys_s - now.quiet_s >= ECHO_S:
        state = AgentState.BUSY
    else:
        state = before.state if before is not None and before.state is not None else AgentState.WAITING
    return AgentReport(now.session_running, state, 0, now.quiet_s, now.keys_s)
