"""Reading the daemon's JSON answers into this tool's types; anything unexpected is `Malformed`."""

from __future__ import annotations

import json
from typing import Any

from opencode_sandbox.core.quiescence import PendingQuestion, SessionState
from opencode_sandbox.core.records import Record

MAX_DETAIL = 200


class Malformed(ValueError):
    """An answer whose shape is not the opencode API's; the text says what was wrong."""


class SessionSummary(Record):
    id: str
    directory: str
    title: str
    parent_id: str | None = None


class Worktree(Record):
    name: str
    directory: str
    branch: str | None = None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise Malformed(f"{what} is not a text value")
    return value


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise Malformed(f"{what} is not a list")
    return value


def brief(value: Any) -> str:
    """A value as short JSON text, for messages and logs."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def read_health(data: Any) -> str:
    """The daemon's version from `GET /global/health`."""
    body = _mapping(data, "the health answer")
    if body.get("healthy") is not True:
        raise Malformed(f"the daemon does not report itself healthy: {brief(body)}")
    return _text(body.get("version"), "the version")


def read_session_state(value: Any) -> SessionState:
    """One entry of `GET /session/status`; shapes this tool does not know become `unknown`."""
    if not isinstance(value, dict):
        return SessionState.unknown(brief(value))
    kind = value.get("type")
    if kind == "idle":
        return SessionState.idle()
    if kind == "busy":
        return SessionState.busy()
    if kind == "retry":
        attempt = value.get("attempt")
        if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0:
            message = value.get("message")
            return SessionState.retry(attempt, message if isinstance(message, str) else "")
    return SessionState.unknown(brief(value))


def read_session_states(data: Any) -> dict[str, SessionState]:
    body = _mapping(data, "the session status answer")
    return {_text(key, "a session id"): read_session_state(value) for key, value in body.items()}


def read_questions(data: Any) -> list[PendingQuestion]:
    questions = []
    for index, item in enumerate(_list(data, "the question answer")):
        entry = _mapping(item, f"question {index}")
        questions.append(
            PendingQuestion(
                id=_text(entry.get("id"), f"the id of question {index}"),
                session_id=_text(entry.get("sessionID"), f"the session of question {index}"),
            )
        )
    return questions


def read_session(data: Any) -> SessionSummary:
    entry = _mapping(data, "a session")
    parent = entry.get("parentID")
    title = entry.get("title")
    return SessionSummary(
        id=_text(entry.get("id"), "a session id"),
        directory=_text(entry.get("directory"), "a session directory"),
        title=title if isinstance(title, str) else "",
        parent_id=parent if isinstance(parent, str) and parent else None,
    )


def read_sessions(data: Any) -> list[SessionSummary]:
    return [read_session(item) for item in _list(data, "the session list")]


def read_worktree(data: Any) -> Worktree:
    entry = _mapping(data, "the worktree")
    branch = entry.get("branch")
    return Worktree(
        name=_text(entry.get("name"), "the worktree name"),
        directory=_text(entry.get("directory"), "the worktree directory"),
        branch=branch if isinstance(branch, str) and branch else None,
    )


def read_worktree_list(data: Any) -> list[Worktree]:
    """`GET /experimental/worktree` lists directories; a worktree's name is its last part."""
    worktrees = []
    for item in _list(data, "the worktree list"):
        directory = _text(item, "a worktree directory").rstrip("/")
        worktrees.append(Worktree(name=directory.rsplit("/", 1)[-1], directory=directory))
    return worktrees


def read_shell_output(data: Any) -> str:
    """The text a `POST /session/{id}/shell` command printed."""
    body = _mapping(data, "the shell answer")
    outputs = []
    for part in _list(body.get("parts"), "the shell answer's parts"):
        if isinstance(part, dict) and part.get("type") == "tool":
            state = part.get("state")
            if isinstance(state, dict) and isinstance(state.get("output"), str):
                outputs.append(state["output"])
    if not outputs:
        raise Malformed("the shell answer has no command output")
    return "".join(outputs)


def error_message(data: Any) -> str | None:
    """The message in one of the daemon's error bodies, None when there is none."""
    if not isinstance(data, dict):
        return None
    nested = data.get("data")
    if isinstance(nested, dict) and isinstance(nested.get("message"), str):
        return str(nested["message"])
    if isinstance(data.get("message"), str):
        return str(data["message"])
    return None
