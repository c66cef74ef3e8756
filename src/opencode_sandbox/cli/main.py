"""The `opencode-sandbox` command tree."""

from __future__ import annotations

from itertools import permutations
from typing import Any

import click

from opencode_sandbox.cli.errors import exit_with_result
from opencode_sandbox.cli.option_table import FLAG, GLOBAL
from opencode_sandbox.cli.options import declared_options
from opencode_sandbox.cli.terminal import terminal_console

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
_GLOBAL_OPTIONS_WITH_VALUE = {spelling for option in GLOBAL.options if option.kind != FLAG
                              for spelling in option.spellings}
_GLOBAL_FLAGS = [spelling for option in GLOBAL.options if option.kind == FLAG for spelling in option.spellings]
_GLOBAL_SHORT_FLAGS = [spelling[1] for spelling in _GLOBAL_FLAGS if len(spelling) == 2]
_GLOBAL_FLAG_WORDS = {*_GLOBAL_FLAGS, *("-" + "".join(cluster) for size in range(2, len(_GLOBAL_SHORT_FLAGS) + 1)
                                       for cluster in permutations(_GLOBAL_SHORT_FLAGS, size))}
"""The global flags and their short spellings run together, as `-yq`."""
_console = terminal_console()


class DefaultToRunGroup(click.Group):
    """A group whose bare invocation, or one starting with run's flags, means `run`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        if ctx.resilient_parsing:  # shell completion: complete command names as typed
            return super().parse_args(ctx, args)
        index = 0
        while index < len(args):
            token = args[index]
            if token in ("-h", "--help", "--version"):
                break
            if token in _GLOBAL_OPTIONS_WITH_VALUE:
                index += 2
                continue
            if token.split("=", 1)[0] in _GLOBAL_OPTIONS_WITH_VALUE or token in _GLOBAL_FLAG_WORDS:
                index += 1
                continue
            if token not in self.commands:
                args.insert(index, "run")
            break
        else:
            args.append("run")
        return super().parse_args(ctx, args)


@click.group(cls=DefaultToRunGroup, context_settings=CONTEXT_SETTINGS)
@declared_options(GLOBAL)
@click.version_option(package_name="opencode-sandbox", prog_name="opencode-sandbox")
@click.pass_context
def cli(ctx: click.Context, /, **global_options: Any) -> None:
    """Run the opencode coding agent in its own isolated VM, one per project.

    Run it inside a checkout: with no command it starts (or reuses) the project's VM and
    attaches opencode to it, like `opencode-sandbox run`.
    """
    from opencode_sandbox.cli.actions import apply_global_flags

    ctx.obj = apply_global_flags(_console, **global_options)


def _register() -> None:
    from opencode_sandbox.cli import (
        commands_build,
        commands_guard,
        commands_info,
        commands_manage,
        commands_network,
        commands_ports,
        commands_run,
        commands_secrets,
        commands_workspace,
    )

    for module in (commands_run, commands_build, commands_manage, commands_network, commands_ports, commands_secrets,
                   commands_guard, commands_info, commands_workspace):
        module.register(cli)


_register()


def main(argv: list[str] | None = None) -> None:
    exit_with_result(lambda: cli.main(args=argv, prog_name="opencode-sandbox", standalone_mode=False), _console)
