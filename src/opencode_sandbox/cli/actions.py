"""The work behind the global flags, `run` and `shell`, apart from the parser that reads them.

The click commands call these, and so does the launcher's fast path, which reads the common
command lines without loading click (see `cli/fast_path.py`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.ui.console import Console, LogLevel

if TYPE_CHECKING:
    from opencode_sandbox.app import App


class AppOpener:
    """The global flags, read before the command's own: the application context opens once both
    are known, so the configuration is loaded and reported once, with every flag merged."""

    def __init__(self, console: Console, assume_yes: bool, runtime: str | None) -> None:
        self.console = console
        self.assume_yes = assume_yes
        self.runtime = runtime
        self._app: App | None = None

    def open(self, cpus: int | None = None, memory: str | None = None, network: str | None = None,
             publish: Sequence[str] = (), agent: str | None = None, isolated: bool = False) -> App:
        """The command's context; the first call opens it with the command's own settings flags."""
        if self._app is None:
            from pathlib import Path

            from opencode_sandbox.app import App

            self._app = App.open(
                console=self.console,
                cwd=Path.cwd(),
                flags={"runtime": self.runtime, "agent": agent, "cpus": cpus, "memory": memory, "network": network,
                       "ports": list(publish) or None, "workspace": "isolated" if isolated else None},
                assume_yes=self.assume_yes,
                interactive=sys.stdin.isatty() and not self.assume_yes,
            )
        return self._app


def apply_global_flags(console: Console, assume_yes: bool, quiet: bool, log_level: str | None,
                       runtime: str | None) -> AppOpener:
    """What the global flags set up for every command: the log level, and what opens the context."""
    if log_level is not None:
        console.level = LogLevel[log_level.upper()]
    elif quiet:
        console.level = LogLevel.ERROR
    return AppOpener(console, assume_yes, runtime)


def run_project(opener: AppOpener, worktree: str | None, rebuild: bool, dry_run: bool, cpus: int | None,
                memory: str | None, network: str | None, publish: Sequence[str], serve_only: bool,
                opencode_args: Sequence[str], agent: str | None = None, isolated: bool = False) -> int:
    app = opener.open(cpus, memory, network, publish, agent, isolated)
    parsed_worktree = None
    if worktree:  # before the dry run's plan: a dry run refuses what a real run would
        from opencode_sandbox.services.start.client import parse_worktree

        parsed_worktree = parse_worktree(worktree)
    if dry_run:
        from opencode_sandbox.core.agents import SessionKind

        profile = app.settings.agent_profile
        if profile.session is SessionKind.TERMINAL:
            from opencode_sandbox.services.start.client import refuse_opencode_options

            refuse_opencode_options(profile, worktree, serve_only)
        print_plan(app, parsed_worktree, rebuild)
        return 0
    from opencode_sandbox.services.start.client import run_attached

    return run_attached(app, rebuild, worktree, serve_only, opencode_args, _wait_forever)


def shell_in_project(opener: AppOpener, root: bool, rebuild: bool, dry_run: bool, cpus: int | None,
                     memory: str | None, network: str | None, publish: Sequence[str], command: Sequence[str],
                     agent: str | None = None, isolated: bool = False) -> int:
    app = opener.open(cpus, memory, network, publish, agent, isolated)
    if dry_run:
        print_plan(app, rebuild=rebuild, wait_for_daemon=False)
        return 0
    from opencode_sandbox.services.start.client import run_shell

    return run_shell(app, rebuild, root, tuple(command))


def print_plan(app: App, worktree: tuple[str, str | None] | None = None, rebuild: bool = False,
               wait_for_daemon: bool = True) -> None:
    """The plan of the start `run` or `shell` would make: the steps the start then carries out."""
    from opencode_sandbox.services.start.pipeline import Start

    for line in Start(app).plan(rebuild, wait_for_daemon).lines():
        print(line)
    if worktree is not None:
        name, base = worktree
        print(f"worktree: use {name}, or create it from {base or 'HEAD'} if it does not exist")


def _wait_forever() -> None:
    import threading

    threading.Event().wait()
