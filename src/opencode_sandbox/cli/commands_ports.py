"""`ports`: the project VM's published ports."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app

if TYPE_CHECKING:
    from opencode_sandbox.app import App


@click.command()
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@pass_app
def ports(app: App, output_format: str) -> None:
    """List the project VM's ports published on the host's 127.0.0.1 (config 'ports', -p/--publish)."""
    from opencode_sandbox.cli.render import render_ports
    from opencode_sandbox.services.published_ports import project_ports

    name, published = project_ports(app)
    click.echo(render_ports(name, published, output_format))


def register(group: click.Group) -> None:
    group.add_command(ports)
