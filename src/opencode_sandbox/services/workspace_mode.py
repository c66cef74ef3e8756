"""Which mode a project's VM works in, as the commands that guard or sync it need to know."""

from __future__ import annotations

from opencode_sandbox.app import App
from opencode_sandbox.core.workspace import ISOLATED
from opencode_sandbox.state.store import ProjectState


def vm_had_checkout(recorded: ProjectState) -> bool:
    """The project's last VM had the checkout mounted: it ran, and not in the isolated mode."""
    return recorded.home_volume is not None and recorded.workspace != ISOLATED


def guard_runs_at_start(app: App, recorded: ProjectState) -> bool:
    """A start reviews the checkout when its VM will have it (the review records what the VM starts
    from), or when the last VM had it (what that one changed is shown)."""
    return app.settings.workspace != ISOLATED or vm_had_checkout(recorded)


def works_isolated(app: App) -> bool:
    """The project's VM was made in the isolated mode."""
    return app.state.load(app.project.slug).workspace == ISOLATED


def guard_runs_after(app: App) -> bool:
    """A detach or a stop reviews the checkout when the VM had it."""
    return not works_isolated(app)
