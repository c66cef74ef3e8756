"""The options of the session-starting lines come from one table, which click and the fast path both read."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from opencode_sandbox.cli.main import cli
from opencode_sandbox.cli.option_table import GLOBAL, RUN, SHELL, CommandLine

CLICK_ONLY = {"help", "version"}


@pytest.mark.parametrize(("command", "declared"), [(cli, GLOBAL), (cli.commands["run"], RUN),
                                                   (cli.commands["shell"], SHELL)],
                         ids=["global", "run", "shell"])
def test_the_click_commands_have_exactly_the_declared_options(command: click.Command, declared: CommandLine) -> None:
    options = [(parameter.name, tuple(parameter.opts), parameter.help) for parameter in command.params
               if isinstance(parameter, click.Option) and parameter.name not in CLICK_ONLY]
    assert options == [(option.parameter, option.spellings, option.help) for option in declared.options]
    arguments = [parameter.name for parameter in command.params if isinstance(parameter, click.Argument)]
    assert arguments == ([declared.rest] if declared.rest else [])


ADDED_TO_THE_TABLE = """
import json, sys
from opencode_sandbox.cli import actions, option_table
from opencode_sandbox.cli.option_table import FLAG, INTEGER, Option

option_table.GLOBAL = option_table.GLOBAL._replace(
    options=(*option_table.GLOBAL.options, Option("zed", ("-z", "--zed"), "Zed.", FLAG)))
option_table.SHELL = option_table.SHELL._replace(
    options=(*option_table.SHELL.options, Option("colours", ("--colours",), "Colours.", INTEGER)))
option_table.COMMANDS["shell"] = option_table.SHELL
calls = []
actions.apply_global_flags = lambda console, **options: calls.append(options) or object()
actions.shell_in_project = lambda app, **options: calls.append(options) or 0

from opencode_sandbox.cli.fast_path import carry_out, recognise
from opencode_sandbox.cli.main import main

readings = {}
for argv in (["--zed", "shell", "--colours", "3", "--", "ls"], ["-qz", "shell", "--colours=3"]):
    invocation = recognise(argv, {})
    if invocation is not None:
        carry_out(invocation)
    readings[" ".join(argv) + " (fast path)"] = calls[:] if invocation is not None else None
    calls.clear()
    try:
        main(argv)
    except SystemExit:
        pass
    readings[" ".join(argv) + " (click)"] = calls[:]
    calls.clear()
print(json.dumps(readings))
"""


def test_an_option_added_to_the_table_is_read_by_click_and_the_fast_path_alike() -> None:
    result = subprocess.run([sys.executable, "-c", ADDED_TO_THE_TABLE], capture_output=True, text=True,
                            check=True, timeout=60)
    readings = json.loads(result.stdout)
    global_options = {"assume_yes": False, "quiet": False, "log_level": None, "runtime": None, "zed": True}
    shell_options = {"root": False, "agent": None, "isolated": False,
                     "rebuild": False, "dry_run": False, "cpus": None, "memory": None, "network": None,
                     "publish": [], "colours": 3}
    expected = [global_options, {**shell_options, "command": ["ls"]}]
    assert readings["--zed shell --colours 3 -- ls (fast path)"] == expected
    assert readings["--zed shell --colours 3 -- ls (click)"] == expected
    assert readings["-qz shell --colours=3 (fast path)"] is None  # short-flag clusters are click's to read
    assert readings["-qz shell --colours=3 (click)"] == [{**global_options, "quiet": True},
                                                          {**shell_options, "command": []}]
