"""A small typed client of the opencode daemon's HTTP API, with its basic auth."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.quiescence import PendingQuestion, SessionActivity, SessionState
from opencode_sandbox.daemon import answers
from opencode_sandbox.daemon.answers import Malformed, SessionSummary, Worktree
from opencode_sandbox.daemon.errors import (
    DaemonAuthFailed,
    DaemonError,
    DaemonProtocolError,
    DaemonRequestFailed,
    DaemonUnreachable,
    WorktreeFailed,
)

if TYPE_CHECKING:
    import httpx

USER = "opencode"
SHELL_AGENT = "build"
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_NO_COMMIT = "no-such-commit"
T = TypeVar("T")
_RESTART_HINT = "stop the VM with `opencode-sandbox stop` and run again"
WORKTREE_TIMEOUT_S = 600.0
"""Making or removing a worktree writes or deletes every file of the checkout: minutes for a large
one or on a slow host, where every other request answers in moments."""


class DaemonClient:
    """One daemon, reached at `base_url` (such as `http://127.0.0.1:4096`)."""

    def __init__(
        self,
        base_url: str,
        password: str | None,
        *,
        timeout_s: float = 5.0,
        connect_timeout_s: float = 2.0,
        log: Callable[[str], None] = lambda _message: None,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._log = log
        self._http = httpx.Client(
            base_url=self.base_url,
            auth=httpx.BasicAuth(USER, password) if password else None,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # reading
    def health(self) -> str:
        """The daemon's version; raises when it does not answer as a healthy opencode daemon."""
        return self._read("GET", "/global/health", answers.read_health)

    def is_healthy(self) -> bool:
        try:
            self.health()
        except DaemonError:
            return False
        return True

    def list_sessions(self, directory: str | None = None) -> list[SessionSummary]:
        return self._read("GET", "/session", answers.read_sessions, directory=directory)

    def session_states(self, directory: str | None = None) -> dict[str, SessionState]:
        """Busy and retrying sessions of one directory (the daemon's own by default).

        Idle sessions mostly drop out of the answer. A state of unknown shape is kept as
        `unknown` (and logged), which the stop decision counts as busy.
        """
        states = self._read("GET", "/session/status", answers.read_session_states, directory=directory)
        for session_id, state in states.items():
            if state.activity is SessionActivity.UNKNOWN:
                self._log(f"session {session_id} reports an unknown state {state.detail}; counted as busy")
        return states

    def pending_questions(self, directory: str | None = None) -> list[PendingQuestion]:
        """Questions an agent asked that nobody has answered yet."""
        return self._read("GET", "/question", answers.read_questions, directory=directory)

    # worktrees
    def list_worktrees(self) -> list[Worktree]:
        return self._read("GET", "/experimental/worktree", answers.read_worktree_list, worktree=True)

    def find_worktree(self, name: str) -> Worktree | None:
        return next((tree for tree in self.list_worktrees() if tree.name == name), None)

    def create_worktree(self, name: str, base: str | None = None) -> Worktree:
        """A new worktree on branch `opencode/<name>`, starting at `base` or at the checkout's HEAD.

        The daemon may adjust the name (it keeps letters, digits and dashes, and appends a
        word when the name is taken): use the returned one. The daemon's API takes no base,
        so a base is checked before anything is created and the new branch is then moved
        to it, both through a short-lived session that is deleted afterwards.
        """
        commit = self._resolve_commit(base) if base else None
        tree = self._read("POST", "/experimental/worktree", answers.read_worktree, body={"name": name},
                          timeout_s=max(self.timeout_s, WORKTREE_TIMEOUT_S), worktree=True)
        if commit is not None and base is not None:
            try:
                self._move_worktree(tree, base, commit)
            except BaseException:
                self._remove_quietly(tree)
                raise
        return tree

    def remove_worktree(self, directory: str) -> None:
        """Remove a worktree and its branch."""
        self._read("DELETE", "/experimental/worktree", _any, body={"directory": directory},
                   timeout_s=max(self.timeout_s, WORKTREE_TIMEOUT_S), worktree=True)

    # sessions and commands
    def create_session(self, title: str, directory: str | None = None) -> str:
        session = self._read("POST", "/session", answers.read_session, body={"title": title}, directory=directory)
        return session.id

    def delete_session(self, session_id: str) -> None:
        self._read("DELETE", f"/session/{session_id}", _any)

    def run_shell(self, session_id: str, command: str, timeout_s: float | None = None) -> str:
        """Run a shell command in the session's directory and return what it printed.

        The session shows as busy until the command ends.
        """
        return self._read(
            "POST",
            f"/session/{session_id}/shell",
            answers.read_shell_output,
            body={"agent": SHELL_AGENT, "command": command},
            timeout_s=timeout_s,
        )

    def abort_session(self, session_id: str) -> None:
        self._read("POST", f"/session/{session_id}/abort", _any)

    # internals
    def _resolve_commit(self, base: str) -> str:
        revision = shlex.quote(f"{base}^{{commit}}")
        command = f"git rev-parse --verify --quiet --end-of-options {revision} || echo {_NO_COMMIT}"
        output = self._run_probe(command, f"check the base '{base}'")
        last = output.strip().splitlines()[-1:] or [""]
        if _COMMIT_RE.match(last[0]):
            return last[0]
        if last[0] == _NO_COMMIT:
            raise WorktreeFailed(
                f"the base '{base}' is not a branch, tag or commit of the project's repository",
                hint="check the name with `git branch -a` or `git log`; fetch it first if it only exists remotely",
            )
        raise WorktreeFailed(
            f"could not check the base '{base}': {answers.brief(output.strip())}",
            hint="check that git works in the project's checkout",
        )

    def _move_worktree(self, tree: Worktree, base: str, commit: str) -> None:
        folder = shlex.quote(tree.directory)
        command = f"git -C {folder} reset --hard --quiet {commit} && git -C {folder} rev-parse HEAD"
        output = self._run_probe(command, f"start the worktree at '{base}'")
        if output.strip().splitlines()[-1:] != [commit]:
            raise WorktreeFailed(
                f"could not start worktree {tree.name} at '{base}': {answers.brief(output.strip())}",
                hint="check the project's checkout with `git status`",
            )

    def _run_probe(self, command: str, purpose: str) -> str:
        session_id = self.create_session(f"opencode-sandbox: {purpose}")
        try:
            return self.run_shell(session_id, command, timeout_s=max(self.timeout_s, 30.0))
        finally:
            try:
                self.delete_session(session_id)
            except (DaemonUnreachable, DaemonRequestFailed, DaemonProtocolError) as error:
                self._log(f"could not delete session {session_id}: {error.message}")

    def _remove_quietly(self, tree: Worktree) -> None:
        try:
            self.remove_worktree(tree.directory)
        except (DaemonUnreachable, DaemonRequestFailed, DaemonProtocolError, WorktreeFailed) as error:
            self._log(f"could not remove worktree {tree.directory}: {error.message}")

    def _read(
        self,
        method: str,
        path: str,
        reader: Callable[[Any], T],
        *,
        body: dict[str, Any] | None = None,
        directory: str | None = None,
        timeout_s: float | None = None,
        worktree: bool = False,
    ) -> T:
        """Send one request and read its JSON answer with `reader`; every failure is a DaemonError."""
        import httpx

        where = f"{method} {path}"
        params = {"directory": directory} if directory else None
        extra: dict[str, Any] = {} if timeout_s is None else {"timeout": timeout_s}
        try:
            response = self._http.request(method, path, params=params, json=body, **extra)
        except httpx.TimeoutException:
            waited = timeout_s if timeout_s is not None else self.timeout_s
            raise DaemonUnreachable(
                f"the opencode daemon at {self.base_url} did not answer {where} within {waited:g}s",
                hint=f"it may be overloaded or hung; {_RESTART_HINT}",
            ) from None
        except httpx.HTTPError as error:
            raise DaemonUnreachable(
                f"cannot reach the opencode daemon at {self.base_url} ({_reason(error)})",
                hint=f"check that the VM is running with `opencode-sandbox list`; {_RESTART_HINT}",
            ) from None
        data = self._decode(response, where)
        if response.status_code == 401:
            raise DaemonAuthFailed(
                f"the opencode daemon at {self.base_url} refused the password",
                hint=f"another daemon may be listening on this port; {_RESTART_HINT}",
            )
        if response.status_code >= 400:
            message = answers.error_message(data) or f"HTTP {response.status_code}"
            failure = WorktreeFailed if worktree else DaemonRequestFailed
            raise failure(
                f"the opencode daemon refused {where}: {message}",
                hint="check the request; the daemon's log is in ~/.local/share/opencode/log inside the VM",
            )
        try:
            return reader(data)
        except Malformed as error:
            raise DaemonProtocolError(
                f"unexpected answer from {self.base_url} to {where}: {error}",
                hint=f"check that the port belongs to the opencode daemon; {_RESTART_HINT}",
            ) from None

    def _decode(self, response: httpx.Response, where: str) -> Any:
        if response.status_code == 401:
            return None
        try:
            return json.loads(response.content)
        except (ValueError, UnicodeDecodeError):
            if response.status_code >= 400:
                return None
            raise DaemonProtocolError(
                f"the answer from {self.base_url} to {where} is not JSON "
                f"(HTTP {response.status_code}, {answers.brief(response.text[:80])})",
                hint=f"check that the port belongs to the opencode daemon; {_RESTART_HINT}",
            ) from None


def _any(data: Any) -> Any:
    return data


def _reason(error: Exception) -> str:
    text = str(error).strip()
    return text or type(error).__name__
