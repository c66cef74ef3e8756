"""Listing, stopping, pruning, and the `sandbox` and `volume` groups."""

from __future__ import annotations

import sys

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app
from opencode_sandbox.cli.commands_run import run as run_command
from opencode_sandbox.cli.options import list_options, prune_options

if TYPE_CHECKING:
    from opencode_sandbox.app import App


def _list_command(name: str) -> click.Command:
    @click.command(name=name)
    @list_options
    @pass_app
    def list_vms(app: App, running: bool, stopped: bool, names: bool, output_format: str) -> None:
        """List your VMs of this tool across all projects (never another host user's), each with its
        agent and, for a terminal agent (all but opencode) in a running VM, whether the agent's session runs."""
        from opencode_sandbox.cli.render import render_sandboxes
        from opencode_sandbox.services.listing import agent_sessions, select_sandboxes
        from opencode_sandbox.ui.table import wants_color

        sandboxes = select_sandboxes(app.runtime, running, stopped)
        sessions = {} if names else agent_sessions(app, sandboxes)
        text = render_sandboxes(sandboxes, output_format, names, wants_color(sys.stdout), sessions)
        if text:
            click.echo(text)

    return list_vms


@click.command()
@click.option("-f", "--force", is_flag=True,
              help="Also remove the VM and the project's state file (home volumes are kept).")
@pass_app
def stop(app: App, force: bool) -> None:
    """Stop the project's VM gracefully.

    Clients still attached are cut off: on a terminal, stop lists them and asks first (skip
    the question with -y/--yes); without a terminal it stops and says how many it cut off.
    Then what the VM changed among the files the host runs is shown, to keep or revert.
    """
    from opencode_sandbox.services.stopping import stop as stop_vm

    stop_vm(app, force)


@click.command()
@click.option("-f", "--force", is_flag=True,
              help="Also remove the VM and the project's state file (home volumes are kept).")
@pass_app
def kill(app: App, force: bool) -> None:
    """Power the project's VM off at once, without waiting for it to shut down."""
    from opencode_sandbox.services.stopping import kill as kill_vm

    kill_vm(app, force)


@click.command()
@prune_options
@pass_app
def prune(app: App, age: str | None, dry_run: bool, force: bool) -> None:
    """Remove stale VMs, their home volumes, and runner images no project needs."""
    _prune(app, age, dry_run, force, "all")


@click.group()
def sandbox() -> None:
    """Project VMs: run, list, prune."""


@sandbox.command(name="prune")
@prune_options
@pass_app
def sandbox_prune(app: App, age: str | None, dry_run: bool, force: bool) -> None:
    """Remove stale VMs and leftover task sandboxes."""
    _prune(app, age, dry_run, force, "sandboxes")


sandbox.add_command(_list_command("list"))
sandbox.add_command(run_command)


@click.group()
def volume() -> None:
    """Home volumes: list, migrate, reset, edit, prune."""


@volume.command(name="list")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@pass_app
def volume_list(app: App, output_format: str) -> None:
    """List this tool's home volumes."""
    from opencode_sandbox.cli.render import render_volumes

    click.echo(render_volumes(app.runtime.list_volumes(), output_format))


def _volume_change_command(name: str, summary: str) -> click.Command:
    @click.command(name=name, help=summary)
    @click.argument("volume_name", metavar="[VOLUME]", required=False)
    @click.option("--rm", "remove_old", is_flag=True,
                  help="Remove the old volume once the new one is complete and recorded.")
    @click.option("-n", "--dry-run", is_flag=True, help="Say what would be done, change nothing.")
    @pass_app
    def change(app: App, volume_name: str | None, remove_old: bool, dry_run: bool) -> None:
        from opencode_sandbox.errors import UsageError
        from opencode_sandbox.services.volumes import VolumeAction, change_volume

        if name == "edit" and not dry_run and not sys.stdin.isatty():
            raise UsageError("volume edit opens an interactive shell and needs a terminal",
                             hint="run it in a terminal, or use `volume migrate` to copy everything")
        change_volume(app, VolumeAction(name), volume_name, remove_old, dry_run)

    return change


for _name, _summary in (
    ("migrate", "New home volume from the image, with VOLUME's files copied on top "
                "(default VOLUME: the project's current one)."),
    ("reset", "New home volume from the image, leaving VOLUME's files behind "
              "(default VOLUME: the project's current one)."),
    ("edit", "New home volume beside VOLUME, and a shell with both mounted for a manual "
             "transfer (default VOLUME: the project's current one)."),
):
    volume.add_command(_volume_change_command(_name, _summary))


@volume.command(name="prune")
@prune_options
@pass_app
def volume_prune(app: App, age: str | None, dry_run: bool, force: bool) -> None:
    """Remove home volumes of pruned VMs."""
    _prune(app, age, dry_run, force, "volumes")


def _prune(app: App, age: str | None, dry_run: bool, force: bool, scope: str) -> None:
    from opencode_sandbox.core.prune_plan import Scope
    from opencode_sandbox.services.prune import prune as run_prune

    run_prune(app, age, Scope(scope), dry_run, force)


def register(group: click.Group) -> None:
    group.add_command(_list_command("list"))
    group.add_command(_list_command("ls"))
    for command in (stop, kill, prune, sandbox, volume):
        group.add_command(command)
