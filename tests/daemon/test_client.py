"""The daemon client against the real `opencode serve`, and against servers that misbehave."""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opencode_sandbox.core.quiescence import PendingQuestion, SessionActivity, SessionState
from opencode_sandbox.daemon.activity import read_activity
from opencode_sandbox.daemon.client import DaemonClient
from opencode_sandbox.daemon.errors import (
    DaemonAuthFailed,
    DaemonProtocolError,
    DaemonRequestFailed,
    DaemonUnreachable,
    WorktreeFailed,
)
from tests.fixtures.fake_daemon import Answer, fake_daemon, json_answer
from tests.fixtures.opencode import OPENCODE_VERSION, RunningDaemon, free_port, opencode_binary, opencode_daemon

__all__ = ["opencode_binary", "opencode_daemon"]

WAIT_S = 30.0
SHELL_S = WAIT_S + 15


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


def git(folder: str | Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def client(opencode_daemon: RunningDaemon) -> Iterator[DaemonClient]:
    with DaemonClient(opencode_daemon.url, opencode_daemon.password) as daemon_client:
        yield daemon_client


class BusyShell:
    """A shell command run through the daemon's shell endpoint, keeping one session busy until released.

    The command ends by itself once released (or after SHELL_S); it is never aborted. opencode
    1.18 can wedge a session for good when an abort arrives while its shell command is still
    starting: neither request answers and the session reports `busy` from then on.
    """

    def __init__(self, daemon: RunningDaemon, folder: Path, directory: str | None = None) -> None:
        self.client = DaemonClient(daemon.url, daemon.password, timeout_s=120)
        self.started = folder / "started"
        self._release = folder / "release"
        self.session_id = self.client.create_session("busy", directory)
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # No `$` in it: the shell endpoint does not pass `$...` through intact.
        wait = shlex.quote(f"until test -e {shlex.quote(str(self._release))}; do sleep 0.1; done")
        command = f"touch {shlex.quote(str(self.started))}; timeout {SHELL_S:.0f} sh -c {wait}"
        try:
            self.client.run_shell(self.session_id, command)
        except BaseException as error:
            self.errors.append(error)

    def finish(self) -> None:
        """Let the command end by itself and wait for its answer."""
        self._release.touch()
        self._thread.join(timeout=SHELL_S + 30)
        self.client.close()


# the real daemon


def test_health_reports_the_version(client: DaemonClient) -> None:
    assert client.health() == OPENCODE_VERSION


@pytest.mark.parametrize("password", [None, "wrong"])
def test_a_missing_or_wrong_password_is_refused(opencode_daemon: RunningDaemon, password: str | None) -> None:
    with DaemonClient(opencode_daemon.url, password) as unauthorised, pytest.raises(DaemonAuthFailed) as caught:
        unauthorised.health()
    assert "refused the password" in caught.value.message
    assert caught.value.hint


def test_a_session_is_busy_while_its_shell_runs_and_idle_after(
    client: DaemonClient, opencode_daemon: RunningDaemon, tmp_path: Path
) -> None:
    shell = BusyShell(opencode_daemon, tmp_path)
    try:
        wait_until(shell.started.exists, "the shell command to start")
        wait_until(lambda: shell.session_id in client.session_states(), "the session to turn busy")
        assert client.session_states()[shell.session_id] == SessionState.busy()
        assert read_activity(client).sessions[shell.session_id] == SessionState.busy()
        assert shell.session_id in {session.id for session in client.list_sessions()}
    finally:
        shell.finish()
    wait_until(
        lambda: client.session_states().get(shell.session_id, SessionState.idle()).activity is SessionActivity.IDLE,
        "the session to turn idle",
    )
    assert shell.errors == []


def test_a_session_busy_in_a_worktree_is_seen_only_by_asking_every_directory(
    client: DaemonClient, opencode_daemon: RunningDaemon, unique: str, tmp_path: Path
) -> None:
    tree = client.create_worktree(f"busy-{unique}")
    shell = BusyShell(opencode_daemon, tmp_path, tree.directory)
    try:
        wait_until(lambda: shell.session_id in client.session_states(tree.directory), "the worktree session")
        assert shell.session_id not in client.session_states()
        assert read_activity(client).sessions[shell.session_id] == SessionState.busy()
    finally:
        shell.finish()
        client.remove_worktree(tree.directory)


def test_no_question_is_pending_without_an_agent_asking(client: DaemonClient) -> None:
    assert client.pending_questions() == []
    assert read_activity(client).questions == ()


def test_a_worktree_is_created_at_head_and_listed(
    client: DaemonClient, opencode_daemon: RunningDaemon, unique: str
) -> None:
    name = f"wt-{unique}"
    tree = client.create_worktree(name)
    try:
        assert tree.name == name
        assert tree.branch == f"opencode/{name}"
        assert git(tree.directory, "rev-parse", "HEAD") == git(opencode_daemon.repository, "rev-parse", "main")
        assert git(tree.directory, "branch", "--show-current") == f"opencode/{name}"
        assert client.find_worktree(name) == type(tree)(name, tree.directory)
        assert tree.directory in {listed.directory for listed in client.list_worktrees()}
    finally:
        client.remove_worktree(tree.directory)
    assert client.find_worktree(name) is None
    assert not Path(tree.directory).exists()


def test_a_worktree_starts_at_the_given_base(
    client: DaemonClient, opencode_daemon: RunningDaemon, unique: str
) -> None:
    tree = client.create_worktree(f"based-{unique}", base="feature")
    try:
        assert git(tree.directory, "rev-parse", "HEAD") == git(opencode_daemon.repository, "rev-parse", "feature")
        assert (Path(tree.directory) / "README.md").read_text() == "first\n"
        assert git(tree.directory, "branch", "--show-current") == tree.branch
    finally:
        client.remove_worktree(tree.directory)
    assert all(not session.title.startswith("opencode-sandbox:") for session in client.list_sessions())


@pytest.mark.parametrize("base", ["no-such-branch", "main..feature", "-rf", "'; touch pwned; '"])
def test_a_bad_base_is_a_clear_error_and_creates_nothing(
    client: DaemonClient, opencode_daemon: RunningDaemon, unique: str, base: str
) -> None:
    before = client.list_worktrees()
    with pytest.raises(WorktreeFailed) as caught:
        client.create_worktree(f"bad-{unique}", base=base)
    assert caught.value.message == (
        f"the base '{base}' is not a branch, tag or commit of the project's repository"
    )
    assert "git branch -a" in (caught.value.hint or "")
    assert client.list_worktrees() == before
    assert not (opencode_daemon.repository / "pwned").exists()
    assert all(not session.title.startswith("opencode-sandbox:") for session in client.list_sessions())


def test_a_worktree_refused_by_the_daemon_is_a_worktree_error() -> None:
    refusal = {"name": "WorktreeNotGitError", "data": {"message": "Worktrees are only supported for git projects"}}
    with fake_daemon() as server:
        server.set("POST", "/experimental/worktree", json_answer(refusal, 400))
        with DaemonClient(server.url, None) as daemon_client, pytest.raises(WorktreeFailed) as caught:
            daemon_client.create_worktree("x")
    assert caught.value.message == (
        "the opencode daemon refused POST /experimental/worktree: Worktrees are only supported for git projects"
    )


def test_a_worktree_may_take_longer_than_any_other_request() -> None:
    """git writes every file of the checkout into a new worktree: minutes on a large one."""
    made = {"name": "big", "directory": "/workspace/.worktrees/big", "branch": "opencode/big"}
    with fake_daemon() as server:
        server.set("POST", "/experimental/worktree", Answer(200, json.dumps(made).encode(), delay_s=1.5))
        server.set("DELETE", "/experimental/worktree", Answer(200, b"true", delay_s=1.5))
        server.set("GET", "/session/status", Answer(200, b"{}", delay_s=1.5))
        with DaemonClient(server.url, None, timeout_s=0.5) as daemon_client:
            assert daemon_client.create_worktree("big").directory == made["directory"]
            daemon_client.remove_worktree(made["directory"])
            with pytest.raises(DaemonUnreachable, match=r"did not answer GET /session/status within 0\.5s"):
                daemon_client.session_states()


# servers that misbehave


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (Answer(200, b"<html>hello</html>", content_type="text/html"), "is not JSON (HTTP 200"),
        (json_answer(["not", "an", "object"]), "the session status answer is not an object"),
        (json_answer({"": {"type": "busy"}}), "a session id is not a text value"),
    ],
)
def test_garbage_answers_raise_a_protocol_error(answer: Answer, expected: str) -> None:
    with fake_daemon() as server:
        server.set("GET", "/session/status", answer)
        with DaemonClient(server.url, None) as daemon_client, pytest.raises(DaemonProtocolError) as caught:
            daemon_client.session_states()
    assert expected in caught.value.message
    assert caught.value.message.startswith(("unexpected answer from", "the answer from"))
    assert "opencode daemon" in (caught.value.hint or "")


def test_garbage_questions_and_health_raise_a_protocol_error() -> None:
    with fake_daemon() as server:
        server.set("GET", "/question", json_answer([{"id": "que_1"}]))
        server.set("GET", "/global/health", json_answer({"healthy": False, "version": "1"}))
        with DaemonClient(server.url, None) as daemon_client:
            with pytest.raises(DaemonProtocolError, match="the session of question 0 is not a text value"):
                daemon_client.pending_questions()
            with pytest.raises(DaemonProtocolError, match="does not report itself healthy"):
                daemon_client.health()


def test_states_of_every_known_shape_and_unknown_ones() -> None:
    logged: list[str] = []
    states = {
        "ses_a": {"type": "idle"},
        "ses_b": {"type": "busy"},
        "ses_c": {"type": "retry", "attempt": 4, "message": "rate limited", "next": 1},
        "ses_d": {"type": "retry", "attempt": "four"},
        "ses_e": {"type": "thinking"},
        "ses_f": "busy",
    }
    with fake_daemon("secret") as server:
        server.set("GET", "/session/status", json_answer(states))
        server.set("GET", "/question", json_answer([{"id": "que_1", "sessionID": "ses_b", "questions": []}]))
        with DaemonClient(server.url, "secret", log=logged.append) as daemon_client:
            read = daemon_client.session_states()
            questions = daemon_client.pending_questions()
    assert read["ses_a"] == SessionState.idle()
    assert read["ses_b"] == SessionState.busy()
    assert read["ses_c"] == SessionState.retry(4, "rate limited")
    assert {read[key].activity for key in ("ses_d", "ses_e", "ses_f")} == {SessionActivity.UNKNOWN}
    assert read["ses_e"].detail == '{"type": "thinking"}'
    assert questions == [PendingQuestion("que_1", "ses_b")]
    assert sorted(line.split()[1] for line in logged) == ["ses_d", "ses_e", "ses_f"]
    assert all("counted as busy" in line for line in logged)


def test_an_error_answer_carries_the_daemons_message() -> None:
    with fake_daemon() as server:
        server.set("GET", "/session", json_answer({"name": "BadRequest", "data": {"message": "bad query"}}, 400))
        server.set("GET", "/question", Answer(500, b"oops", content_type="text/plain"))
        with DaemonClient(server.url, None) as daemon_client:
            with pytest.raises(DaemonRequestFailed) as caught:
                daemon_client.list_sessions()
            assert caught.value.message == "the opencode daemon refused GET /session: bad query"
            with pytest.raises(DaemonRequestFailed, match="refused GET /question: HTTP 500"):
                daemon_client.pending_questions()


def test_a_slow_answer_times_out_with_a_clear_error() -> None:
    with fake_daemon() as server:
        server.set("GET", "/global/health", Answer(200, b'{"healthy":true,"version":"1"}', delay_s=3))
        with DaemonClient(server.url, None, timeout_s=0.3) as daemon_client, pytest.raises(DaemonUnreachable) as caught:
            daemon_client.health()
    assert caught.value.message == f"the opencode daemon at {server.url} did not answer GET /global/health within 0.3s"


def test_nothing_listening_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with DaemonClient(url, "pw") as daemon_client, pytest.raises(DaemonUnreachable) as caught:
        daemon_client.session_states()
    assert caught.value.message.startswith(f"cannot reach the opencode daemon at {url} (")
    assert "opencode-sandbox list" in (caught.value.hint or "")
