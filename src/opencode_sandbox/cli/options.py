"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from opencode_sandbox.cli.option_table import FLAG, INTEGER, REPEATED, CommandLine, Option

AGE_HELP = ("Artifacts unused for longer than this are pruned: 30d, 24h, 90m, 45s "
            "(default: config 'manual-prune-age', 7d).")


def declared_options(command_line: CommandLine) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click options, and the arguments after `--`, of a line declared in `cli/option_table.py`."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        if command_line.rest:
            function = click.argument(command_line.rest, nargs=-1, type=click.UNPROCESSED,
                                      metavar=command_line.rest_metavar)(function)
        for option in reversed(command_line.options):
            function = _click_option(option)(function)
        return function

    return decorate


def _click_option(option: Option) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    settings: dict[str, Any] = {"help": option.help}
    if option.kind == FLAG:
        settings["is_flag"] = True
    elif option.kind == REPEATED:
        settings["multiple"] = True
    else:
        settings["default"] = None
    if option.kind == INTEGER:
        settings["type"] = int
    if option.choices:
        settings["type"] = click.Choice(option.choices)
    if option.metavar:
        settings["metavar"] = option.metavar
    return click.option(*option.spellings, option.parameter, **settings)


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
