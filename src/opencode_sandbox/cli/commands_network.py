"""The `network` group: what the project VM's network policy refused."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app

if TYPE_CHECKING:
    from opencode_sandbox.app import App


@click.group()
def network() -> None:
    """The project VM's network policy: what it refused."""


@network.command(name="log")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@pass_app
def network_log(app: App, output_format: str) -> None:
    """List the connections the project VM's network policy refused in the last hour, and why."""
    from opencode_sandbox.cli.render import render_refusals
    from opencode_sandbox.services.network_log import refusals

    name, found = refusals(app)
    click.echo(render_refusals(name, found, app.settings.egress_policy, output_format))


def register(group: click.Group) -> None:
    group.add_command(network)
