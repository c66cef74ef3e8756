"""A `shell -- CMD` made ready in the project's VM while the start checks.

When `shell` runs a command without a terminal and finds the project's VM running as it should,
the runtime makes the command's process before the start's checks (`PreparedCommand`), and starts
it only once the start kept the VM as it found it. The engine's work of making a process then
overlaps the launcher's; the command itself starts no earlier than without it. A start that
changed the VM, or failed, drops it unstarted, and the command runs as it would have."""

from __future__ import annotations

from collections.abc import Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.app import App
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.runtime.types import SandboxStatus

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import PreparedCommand


def prepare_command(app: App, vm: str, argv: Sequence[str], user: str) -> PreparedCommand | None:
    """The command made ready in `vm`, or None: the VM is not this user's, not running, or not as
    it should be (its network policy to restore), or the runtime cannot; the start then goes on
    as without it."""
    if not app.runtime.description.prepares_commands:
        return None  # not even a question to the runtime: a warm start asks it as little as it can
    try:
        info = app.runtime.get_sandbox(vm)
        if info is None or info.status is not SandboxStatus.RUNNING or info.repair or info.owner_unlabelled:
            return None
        return app.runtime.prepare_command(vm, argv, user=user)
    except SandboxError as error:
        app.console.verbose(f"the command was not made ready while the start checks: {error}")
        return None
