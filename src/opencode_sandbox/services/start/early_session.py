"""A terminal agent's session started before the start's checks end: when `run` finds the
project's VM running with the agent it asks for and no session in it, the agent starts at once and
boots while the launcher checks; the user's terminal attaches to it once the start is done. A start
that changed what the agent reads as it starts (a file of the checkout reverted, a VM made or
started, files copied into its home), or that failed, ends the session again unless a client
watches it, and the attach starts a new one as it would have."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opencode_sandbox.app import App
from opencode_sandbox.core.agents import AgentProfile
from opencode_sandbox.core.naming import LABEL_AGENT
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.guest.terminal_session import (
    SESSION_ID,
    WORKSPACE,
    end_unwatched_command,
    start_command,
)
from opencode_sandbox.runtime.types import SandboxStatus

EXEC_TIMEOUT_S = 10
"""The VM's tmux is the VM's to make slow; a start does not wait on it for longer."""


class EarlySession:
    """The agent's session this run started in `vm`, known by its tmux id."""

    def __init__(self, app: App, vm: str, session_id: str) -> None:
        self.app = app
        self.vm = vm
        self.session_id = session_id

    @classmethod
    def start(cls, app: App, vm: str, profile: AgentProfile, arguments: Sequence[str],
              terminal_size: tuple[int, int], env: Mapping[str, str] | None) -> EarlySession | None:
        """The session started now, or None: the VM is not running as it should for this agent
        (stopped, another agent's, its network policy to restore), a session runs already, or
        the VM did not answer; the start then goes on as without it."""
        try:
            info = app.runtime.get_sandbox(vm)
            if info is None or info.status is not SandboxStatus.RUNNING or info.repair or info.owner_unlabelled \
                    or info.labels.get(LABEL_AGENT) != profile.name:
                return None
            columns, lines = terminal_size
            started = app.runtime.exec(vm, start_command(profile, arguments, columns, lines), workdir=WORKSPACE,
                                       env=env, timeout_s=EXEC_TIMEOUT_S)
        except SandboxError as error:
            app.console.verbose(f"the agent's session did not start early: {error}")
            return None
        session_id = started.stdout.strip()
        if started.exit_code != 0 or SESSION_ID.fullmatch(session_id) is None:
            return None  # one runs already (tmux: duplicate session), which the attach joins
        app.console.verbose(f"started the agent's session {session_id} while the start checks")
        return cls(app, vm, session_id)

    def end(self) -> None:
        """End the session unless a client is attached to it by now."""
        self.app.console.verbose(f"ending the agent's session {self.session_id}, started early, unless a client "
                                 "watches it: the start changed what the agent reads as it starts")
        try:
            self.app.runtime.exec(self.vm, end_unwatched_command(self.session_id), workdir=WORKSPACE,
                                  timeout_s=EXEC_TIMEOUT_S)
        except SandboxError as error:
            self.app.console.verbose(f"the early session {self.session_id} was not ended: {error}")
