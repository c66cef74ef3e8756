"""When the agent needs the user: a turn that ended, a question or a permission it asks. Judged
from two readings of what the agent does, the one before and the one now; the first reading
only sets the baseline, so a watch that starts late never repeats an old event."""

from __future__ import annotations

from opencode_sandbox.core.agent_activity import NEEDS_YOU, AgentReport, AgentState
from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.quiescence import DaemonActivity, SessionActivity
from opencode_sandbox.core.records import Record


class Attention(Record):
    title: str
    body: str


def agent_attention(before: AgentReport | None, now: AgentReport, agent: str, project: str,
                    source: ActivitySource = ActivitySource.HOOKS) -> Attention | None:
    """A terminal agent's hooks recorded a new turn's end or a new question since `before`; for an
    agent without hooks, its output's state (`core/terminal_activity.with_output_state`) went from
    busy to waiting, which is all its terminal tells."""
    if before is None or now.state not in NEEDS_YOU or (now.state, now.at_ns) == (before.state, before.at_ns):
        return None
    if source is ActivitySource.TERMINAL and before.state is not AgentState.BUSY:
        return None
    if now.state is AgentState.ASKING:
        return Attention(f"{agent} needs you", f"{agent} asks for your answer in {project}")
    return Attention(f"{agent} is done", f"{agent} finished its turn in {project}")


def daemon_attention(before: DaemonActivity | None, now: DaemonActivity, project: str) -> Attention | None:
    """opencode: a question that was not pending before, or a session that worked and now rests."""
    if before is None:
        return None
    asked = {question.id for question in now.questions} - {question.id for question in before.questions}
    if asked:
        return Attention("opencode needs you", f"opencode asks for your answer in {project}")
    worked = {session for session, state in before.sessions.items() if state.activity is not SessionActivity.IDLE}
    rests = [session for session in worked
             if session not in now.sessions or now.sessions[session].activity is SessionActivity.IDLE]
    if rests:
        return Attention("opencode is done", f"opencode finished its turn in {project}")
    return None
