"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

AGE_HELP = ("Artifacts unused for longer than this are pruned: 30d, 24h, 90m, 45s "
            "(default: config 'manual-prune-age', 7d).")


def prune_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
        click.option("-a", "--age", metavar="AGE", default=None, help=AGE_HELP),
        click.option("-n", "--dry-run", is_flag=True, help="Print the plan, remove nothing."),
        click.option("--force", is_flag=True, help="Remove without asking for confirmation."),
    )):
        function = option(function)
    return function


def list_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
        click.option("--running", is_flag=True, help="Only running VMs."),
        click.option("--stopped", is_flag=True, help="Only VMs that are not running."),
        click.option("--names", is_flag=True, help="Print the names only, one a line."),
        click.option("--format", "output_format", type=click.Choice(["table", "json"]),
                     default="table", help="Output format."),
    )):
        function = option(function)
    return function
