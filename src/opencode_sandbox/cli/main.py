"""The `opencode-sandbox` command tree."""

from __future__ import annotations

import click

from opencode_sandbox.cli.errors import exit_with_result
from opencode_sandbox.ui.console import LOG_LEVEL_NAMES, Console

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
_GLOBAL_OPTIONS_WITH_VALUE = {"--log-level", "--runtime"}
_console = Console()


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
            if token.split("=", 1)[0] in _GLOBAL_OPTIONS_WITH_VALUE or token in (
                "-y", "--yes", "-q", "--quiet", "-yq", "-qy"
            ):
                index += 1
                continue
            if token not in self.commands:
                args.insert(index, "run")
            break
        else:
            args.append("run")
        return super().parse_args(ctx, args)


@click.group(cls=DefaultToRunGroup, context_settings=CONTEXT_SETTINGS)
@click.option("-y", "--yes", "assume_yes", is_flag=True,
              help="Take the default answer of every prompt.")
@click.option("-q", "--quiet", is_flag=True, help="Print errors only.")
@click.option("--log-level", type=click.Choice(LOG_LEVEL_NAMES), default=None,
              help="How much to print: error, warning, info (default) or verbose "
                   "(also where each setting came from, and tracebacks).")
@click.option("--runtime", type=click.Choice(["microsandbox", "docker"]), default=None,
              help="VM runtime: microsandbox (microVMs, default) or docker (shares the host "
                   "kernel).")
@click.version_option(package_name="opencode-sandbox", prog_name="opencode-sandbox")
@click.pass_context
def cli(ctx: click.Context, assume_yes: bool, quiet: bool, log_level: str | None,
        runtime: str | None) -> None:
    """Run the opencode coding agent in its own isolated VM, one per project.

    Run it inside a checkout: with no command it starts (or reuses) the project's VM and
    attaches opencode to it, like `opencode-sandbox run`.
    """
    from opencode_sandbox.cli.actions import apply_global_flags

    ctx.obj = apply_global_flags(_console, assume_yes, quiet, log_level, runtime)


def _register() -> None:
    from opencode_sandbox.cli import commands_build, commands_info, commands_manage, commands_run

    for module in (commands_run, commands_build, commands_manage, commands_info):
        module.register(cli)


_register()


def main(argv: list[str] | None = None) -> None:
    exit_with_result(lambda: cli.main(args=argv, prog_name="opencode-sandbox", standalone_mode=False), _console)
