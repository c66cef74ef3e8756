"""Failures talking to the opencode daemon, each with what to do next."""

from __future__ import annotations

from opencode_sandbox.errors import SandboxError


class DaemonError(SandboxError):
    """The opencode daemon could not be used."""


class DaemonUnreachable(DaemonError):
    """No answer: nothing listens on the port, or the answer took too long."""


class DaemonAuthFailed(DaemonError):
    """The daemon refused the password."""


class DaemonProtocolError(DaemonError):
    """An answer that is not what the opencode API sends: another program, or a new API."""


class DaemonRequestFailed(DaemonError):
    """The daemon understood the request and refused it."""


class WorktreeFailed(DaemonError):
    """A worktree that could not be listed, created or removed."""
