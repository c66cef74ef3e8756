"""`diff` and `apply`: the work of a VM on its own work tree, which reaches the host as git data."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app

if TYPE_CHECKING:
    from opencode_sandbox.app import App

BRANCH_HELP = "The VM's branch whose work to read (default: the host's checked-out branch; HEAD when detached)."


@click.command(name="diff")
@click.option("--branch", metavar="NAME", default=None, help=BRANCH_HELP)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              help="Output format.")
@pass_app
def diff(app: App, branch: str | None, output_format: str) -> None:
    """Show the VM's work that the host's work tree does not hold yet, against your current files."""
    from opencode_sandbox.services.isolated.diff_view import show

    _bring_the_vms_work(app)
    show(app, branch, output_format)


@click.command(name="apply")
@click.option("--branch", metavar="NAME", default=None, help=BRANCH_HELP)
@click.option("-y", "--yes", "assume_yes", is_flag=True,
              help="Ask nothing: leave out (and list) every change that would be asked about.")
@click.option("--exactly", metavar="COMMIT", default=None,
              help="Take this very commit of the VM's work, the one `diff` showed (its whole id), not the newest.")
@pass_app
def apply(app: App, branch: str | None, assume_yes: bool, exactly: str | None) -> None:
    """Bring the VM's work into the host's work tree as uncommitted changes (never commits)."""
    from opencode_sandbox.services.isolated.apply import apply as apply_work

    if exactly is None:
        _bring_the_vms_work(app)
    apply_work(app, branch, assume_yes or app.assume_yes, exactly)


def _bring_the_vms_work(app: App) -> None:
    """A running VM's work as it is now, not as the last sync found it."""
    from opencode_sandbox.services.stopping import sync_git
    from opencode_sandbox.services.workspace_mode import works_isolated

    if works_isolated(app):
        sync_git(app)


def register(group: click.Group) -> None:
    group.add_command(diff)
    group.add_command(apply)
