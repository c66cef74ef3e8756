"""The `opencode-sandbox` console script: the command line in a process set up for a short life."""

from __future__ import annotations

import gc
import os
import sys


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
            carry_out(invocation)
        from opencode_sandbox.cli.main import main as run_command_line

        run_command_line()
    finally:
        gc.freeze()  # the interpreter's last collection at exit skips what is frozen
