"""`doctor`, `version` and `completion`."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app

if TYPE_CHECKING:
    from opencode_sandbox.app import App



@click.command()
@pass_app
def doctor(app: App) -> int:
    """Check that Docker, KVM, git and the msb runtime can work here.

    In a project whose VM runs, also check that dev can use its home there.
    """
    from opencode_sandbox.cli.render import render_report
    from opencode_sandbox.services.doctor import project_checks, run_checks

    report = run_checks(app.settings.runtime, project_checks(app))
    render_report(report, app.console)
    return 0 if report.runtime_ready else 1


@click.command()
@pass_app
def version(app: App) -> None:
    """Print the version of opencode-sandbox."""
    del app  # opened all the same: a bad configuration stops every command
    from opencode_sandbox import __version__

    click.echo(f"opencode-sandbox {__version__}")


@click.command()
@click.argument("shell_name", metavar="SHELL", type=click.Choice(["bash", "zsh", "fish"]))
@pass_app
def completion(app: App, shell_name: str) -> None:
    """Print the completion script for SHELL (bash, zsh or fish).

    For bash: eval "$(opencode-sandbox completion bash)" in ~/.bashrc.
    """
    del app  # opened all the same: a bad configuration stops every command
    from click.shell_completion import get_completion_class

    from opencode_sandbox.cli.main import cli

    completion_class = get_completion_class(shell_name)
    if completion_class is None:  # click.Choice already limits the names
        raise click.BadParameter(f"unsupported shell {shell_name}")
    click.echo(completion_class(cli, {}, "opencode-sandbox", "_OPENCODE_SANDBOX_COMPLETE").source())


def register(group: click.Group) -> None:
    for command in (doctor, version, completion):
        group.add_command(command)
