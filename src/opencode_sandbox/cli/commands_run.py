"""`run` and `shell`: the project's VM on the user's terminal.

Their options are declared in `cli/option_table.py`, which the launcher's fast path reads too.
"""

from __future__ import annotations

from typing import Any

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.option_table import RUN, SHELL
from opencode_sandbox.cli.options import declared_options

if TYPE_CHECKING:
    from opencode_sandbox.cli.actions import AppOpener


@click.command()
@declared_options(RUN)
@click.pass_obj
def run(opener: AppOpener, /, **options: Any) -> int:
    """Start or reuse the project's VM and attach opencode to it (the default command).

    Arguments after `--` are passed to `opencode attach`.
    """
    from opencode_sandbox.cli.actions import run_project

    return run_project(opener, **options)


@click.command()
@declared_options(SHELL)
@click.pass_obj
def shell(opener: AppOpener, /, **options: Any) -> int:
    """Open a shell in the project's VM, or run CMD there as dev in /workspace.

    With CMD, exits with its exit code. A stopped VM is started, but not the agent's server,
    which a shell does not need: the next `run` starts it.
    """
    from opencode_sandbox.cli.actions import shell_in_project

    return shell_in_project(opener, **options)


def register(group: click.Group) -> None:
    group.add_command(run)
    group.add_command(shell)
