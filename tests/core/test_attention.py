"""When the agent needs the user, judged from two readings of what it does."""

from __future__ import annotations

from opencode_sandbox.core.agent_activity import AgentReport, AgentState
from opencode_sandbox.core.attention import agent_attention, daemon_attention
from opencode_sandbox.core.quiescence import DaemonActivity, PendingQuestion, SessionState


def test_the_first_reading_only_sets_the_baseline() -> None:
    assert agent_attention(None, AgentReport(True, AgentState.WAITING, 5), "Codex", "shop") is None
    assert daemon_attention(None, DaemonActivity({"s": SessionState.idle()}), "shop") is None


def test_a_new_turn_end_and_a_new_question_need_the_user_once() -> None:
    busy = AgentReport(True, AgentState.BUSY, 1)
    done = AgentReport(True, AgentState.WAITING, 2)
    attention = agent_attention(busy, done, "Claude Code", "shop")
    assert attention is not None and attention.body == "Claude Code finished its turn in shop"
    assert agent_attention(done, done, "Claude Code", "shop") is None, "the same event is signalled once"
    asking = agent_attention(done, AgentReport(True, AgentState.ASKING, 3), "Claude Code", "shop")
    assert asking is not None and "asks for your answer" in asking.body
    again = agent_attention(done, AgentReport(True, AgentState.WAITING, 4), "Claude Code", "shop")
    assert again is not None, "the next turn's end is a new event"


def test_work_and_rest_alone_need_nothing() -> None:
    idle = AgentReport(True, AgentState.IDLE, 1)
    assert agent_attention(idle, AgentReport(True, AgentState.BUSY, 2), "Codex", "shop") is None
    assert agent_attention(idle, AgentReport(True, AgentState.ENDED, 2), "Codex", "shop") is None
    assert agent_attention(idle, AgentReport(False), "Codex", "shop") is None


def test_opencode_needs_the_user_when_a_session_rests_after_work_or_asks() -> None:
    busy = DaemonActivity({"a": SessionState.busy(), "b": SessionState.idle()})
    rests = daemon_attention(busy, DaemonActivity({"a": SessionState.idle(), "b": SessionState.idle()}), "shop")
    assert rests is not None and rests.body == "opencode finished its turn in shop"
    assert daemon_attention(busy, DaemonActivity({"b": SessionState.idle()}), "shop") is not None, "a session gone"
    assert daemon_attention(busy, busy, "shop") is None
    asked = DaemonActivity({"a": SessionState.busy()}, (PendingQuestion("q1", "a"),))
    question = daemon_attention(busy, asked, "shop")
    assert question is not None and "asks" in question.body
    assert daemon_attention(asked, asked, "shop") is None, "a question is signalled when it appears"
    quiet = DaemonActivity({"b": SessionState.idle()})
    assert daemon_attention(quiet, DaemonActivity({"b": SessionState.busy()}), "shop") is None
