"""Expected failures: each carries a one-line cause, a hint and an exit code."""

from __future__ import annotations


class SandboxError(Exception):
    """A failure the user can act on. Exit code 1: something at runtime went wrong."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(SandboxError):
    """Bad input: a flag, an argument or a file the user wrote. Exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration file or value that cannot be used."""


class NotAvailableYet(UsageError):
    """A command whose capability this version does not ship."""


class RuntimeUnavailable(SandboxError):
    """The selected VM runtime cannot be used on this host."""


class NotFound(SandboxError):
    """A sandbox, volume or image that does not exist."""


class NotOurs(SandboxError):
    """An artifact with one of our names that this tool did not create."""


class OwnedByAnother(SandboxError):
    """One of this tool's artifacts that another host user made, or whose owner cannot be told:
    on a shared Docker engine, nothing of another user's is attached to, changed or removed.
    `owner_uid` is the uid its label names, None when it carries none."""

    def __init__(self, message: str, hint: str | None = None, *, owner_uid: int | None) -> None:
        super().__init__(message, hint)
        self.owner_uid = owner_uid


class BootFailed(SandboxError):
    """A sandbox that could not be started."""


class VmDidNotBoot(BootFailed):
    """The VM itself did not come up, with its image and settings in place: the runtime's own
    failure, which another attempt may not repeat. `cause` is the short reason, one line."""

    def __init__(self, message: str, hint: str | None = None, *, cause: str) -> None:
        super().__init__(message, hint)
        self.cause = cause
