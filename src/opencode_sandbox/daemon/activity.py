"""Everything the daemon is doing, across the project's checkout and all its worktrees.

The daemon answers `/session/status` and `/question` per directory (its own checkout when
none is given), so a session busy in a worktree is only seen when that worktree is asked.
"""

from __future__ import annotations

from opencode_sandbox.core.quiescence import DaemonActivity, PendingQuestion, SessionState
from opencode_sandbox.daemon.client import DaemonClient


def project_directories(client: DaemonClient) -> list[str | None]:
    """None (the daemon's own directory), then every worktree and session directory."""
    found = {tree.directory for tree in client.list_worktrees()}
    found.update(session.directory for session in client.list_sessions())
    return [None, *sorted(found)]


def read_activity(client: DaemonClient) -> DaemonActivity:
    sessions: dict[str, SessionState] = {}
    questions: dict[str, PendingQuestion] = {}
    for directory in project_directories(client):
        sessions.update(client.session_states(directory))
        questions.update((question.id, question) for question in client.pending_questions(directory))
    return DaemonActivity(sessions, tuple(questions[key] for key in sorted(questions)))
