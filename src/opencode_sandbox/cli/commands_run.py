"""`run` and `shell`: the project's VM on the user's terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from opencode_sandbox.cli.actions import AppOpener

MEMORY_HELP = "Memory of the VM, such as 4G (default: config 'memory', 4G)."
CPUS_HELP = "Virtual CPUs of the VM (default: config 'cpus', 2)."


@click.command(context_settings={"ignore_unknown_options": False})
@click.option("-w", "--worktree", metavar="NAME[:BASE]",
              help="Attach to the opencode worktree NAME inside the VM, creating it from BASE "
                   "(a git ref, default HEAD) when it does not exist.")
@click.option("-r", "--rebuild", is_flag=True, help="Rebuild the runner image from scratch first.")
@click.option("-n", "--dry-run", is_flag=True,
              help="Check the inputs as a run would and print what it would do, changing nothing.")
@click.option("-c", "--cpus", type=int, default=None, help=CPUS_HELP)
@click.option("-m", "--memory", default=None, metavar="SIZE", help=MEMORY_HELP)
@click.option("-s", "--serve-only", is_flag=True,
              help="Start the opencode server, print its URL and credentials, and wait "
                   "instead of attaching.")
@click.argument("opencode_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- OPENCODE_ARGS]...")
@click.pass_obj
def run(opener: AppOpener, worktree: str | None, rebuild: bool, dry_run: bool, cpus: int | None,
        memory: str | None, serve_only: bool, opencode_args: tuple[str, ...]) -> int:
    """Start or reuse the project's VM and attach opencode to it (the default command).

    Arguments after `--` are passed to `opencode attach`.
    """
    from opencode_sandbox.cli.actions import run_project

    return run_project(opener, worktree, rebuild, dry_run, cpus, memory, serve_only, opencode_args)


@click.command()
@click.option("--root", is_flag=True, help="Run as root instead of the user dev.")
@click.option("-r", "--rebuild", is_flag=True, help="Rebuild the runner image from scratch first.")
@click.option("-n", "--dry-run", is_flag=True,
              help="Check the inputs as a start would and print what it would do, changing nothing.")
@click.option("-c", "--cpus", type=int, default=None, help=CPUS_HELP)
@click.option("-m", "--memory", default=None, metavar="SIZE", help=MEMORY_HELP)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD...]")
@click.pass_obj
def shell(opener: AppOpener, root: bool, rebuild: bool, dry_run: bool, cpus: int | None,
          memory: str | None, command: tuple[str, ...]) -> int:
    """Open a shell in the project's VM, or run CMD there as dev in /workspace.

    With CMD, exits with its exit code.
    """
    from opencode_sandbox.cli.actions import shell_in_project

    return shell_in_project(opener, root, rebuild, dry_run, cpus, memory, command)


def register(group: click.Group) -> None:
    group.add_command(run)
    group.add_command(shell)
