"""Turning failures into one-line messages and exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.ui.console import Console

if TYPE_CHECKING:
    from typing import Any, NoReturn

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def exit_with_result(command: Callable[[], Any], console: Console) -> NoReturn:
    """Run the command and exit with its code."""
    sys.exit(run_reported(command, console))


def run_reported(command: Callable[[], Any], console: Console) -> int:
    """Run the command; its exit code. Every failure ends here with a message and a code."""
    try:
        result = command()
    except SystemExit:
        raise
    except BaseException as error:
        return report(error, console)
    return result if isinstance(result, int) else 0


def report(error: BaseException, console: Console) -> int:
    """Print the failure for the user and return the exit code."""
    if isinstance(error, SandboxError):
        console.error(error.message, error.hint)
        code = error.exit_code
    elif isinstance(error, KeyboardInterrupt):
        console.error("interrupted")
        return EXIT_INTERRUPTED
    elif isinstance(error, BrokenPipeError) and _reader_gone(sys.stdout):
        # `... | head`: the rest of the output has nobody to read it. Ended quietly with 1, as
        # click ends its own commands in that case.
        _discard_further_output(sys.stdout)
        return EXIT_RUNTIME
    elif (click_code := _click_failure(error, console)) is not None:
        return click_code
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


def _click_failure(error: BaseException, console: Console) -> int | None:
    """The exit code of a failure the command-line parser raised, after telling the user."""
    click = sys.modules.get("click")  # not loaded: the failure cannot be one of its own
    if click is None:
        return None
    if isinstance(error, click.exceptions.Exit):
        code: int = error.exit_code
        return code
    if isinstance(error, click.exceptions.Abort):
        console.error("interrupted")
        return EXIT_INTERRUPTED
    if isinstance(error, click.ClickException):
        error.show()
        code = error.exit_code
        return code
    return None


def _reader_gone(stream: Any) -> bool:
    """Whether `stream` is a pipe or socket whose reading end is closed."""
    import select

    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, ValueError, OSError):
        return False


def _discard_further_output(stream: Any) -> None:
    """Point the stream's descriptor at /dev/null, so the interpreter's last flush has nowhere to fail."""
    import os

    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), stream.fileno())
