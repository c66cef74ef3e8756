"""The `opencode-sandbox` console script: the command line in a process set up for a short life."""

from __future__ import annotations

import gc
import os
import sys

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import NoReturn


def main() -> None:
    # The launcher allocates thousands of long-lived objects (modules, classes, functions) and
    # next to no cyclic garbage, so the cyclic collector's passes over them, during the imports
    # and again when the interpreter exits, free nothing and cost a fifth of a warm start.
    # Reference counting still frees everything else.
    gc.disable()
    try:
        from opencode_sandbox.cli.fast_path import carry_out, recognise

        invocation = recognise(sys.argv[1:], os.environ)
        if invocation is not None:
            leave(carry_out(invocation))
        from opencode_sandbox.cli.main import main as run_command_line

        run_command_line()
    finally:
        gc.freeze()  # the interpreter's last collection at exit skips what is frozen


def leave(code: int) -> NoReturn:
    """End the process now, skipping the interpreter's teardown of the modules it loaded.

    Everything the fast path writes or holds is done or released by the time it returns (its
    files are closed, its locks released, its helper threads joined or no longer needed), so
    only the standard streams are left to flush.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the process started with that descriptor closed
                stream.flush()
        except OSError:
            code = code or 120  # as the interpreter reports an output it could not flush at exit
    os._exit(code)
