"""Turning failures into one-line messages and exit codes."""

from __future__ import annotations

import click

from opencode_sandbox.errors import SandboxError
from opencode_sandbox.ui.console import Console

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def report(error: BaseException, console: Console) -> int:
    """Print the failure for the user and return the exit code."""
    if isinstance(error, SandboxError):
        console.error(error.message, error.hint)
        code = error.exit_code
    elif isinstance(error, click.exceptions.Abort | KeyboardInterrupt):
        console.error("interrupted")
        return EXIT_INTERRUPTED
    elif isinstance(error, click.ClickException):
        error.show()
        return error.exit_code
    else:
        console.error(
            f"unexpected failure: {type(error).__name__}: {error}",
            "run again with --log-level verbose and report the output",
        )
        code = EXIT_RUNTIME
    if console.verbose_enabled:
        import traceback

        console.verbose("".join(traceback.format_exception(error)).rstrip())
    return code
