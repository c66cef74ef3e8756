"""The `guard` group: the files of the checkout that the host runs."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app

if TYPE_CHECKING:
    from opencode_sandbox.app import App


@click.group()
def guard() -> None:
    """The files of the checkout the host runs (git hooks and config, .envrc, editor tasks)."""


@guard.command(name="status")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@pass_app
def guard_status(app: App, output_format: str) -> None:
    """Show whether the guarded files changed since the last run, shell, detach or stop recorded them."""
    from opencode_sandbox.cli.render import render_status
    from opencode_sandbox.services.guard.reviews import status

    click.echo(render_status(status(app), output_format))


def register(group: click.Group) -> None:
    group.add_command(guard)
