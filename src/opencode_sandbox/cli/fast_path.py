"""The common command lines, read without loading the command-line framework.

`opencode-sandbox`, `run ...` and `shell ... -- CMD` start most sessions, and loading click
and its own imports would be a third of such a start. This reads exactly those lines: global
flags, then `run` or `shell` (or nothing, meaning `run`) with their options, then `--` and the
arguments passed on. Anything else (help, a short-flag cluster, a positional argument before
`--`, a value that click would reject or read differently) is declined, and the full parser
in `cli/main.py` takes the line. Tests hold both readings equal on every line this accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.option_table import COMMANDS, FLAG, GLOBAL, INTEGER, REPEATED, CommandLine, Option
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from typing import Any

COMPLETION_VARIABLE = "_OPENCODE_SANDBOX_COMPLETE"


class Invocation(Record):
    command: str
    """`run` or `shell`."""
    global_options: dict[str, Any]
    options: dict[str, Any]
    """The command's parameters, named as its function's arguments."""


class _Declined(Exception):
    """The line is not one this reader takes; the full parser reads it."""


def recognise(argv: Sequence[str], environ: Mapping[str, str]) -> Invocation | None:
    """The invocation `argv` asks for, or None when the full parser must read it."""
    if COMPLETION_VARIABLE in environ:
        return None  # the shell asks click for completions
    words = list(argv)
    try:
        global_options, position = _read_options(words, 0, GLOBAL, stop_at_word=True)
        command = "run"
        if position < len(words) and words[position] in COMMANDS:
            command = words[position]
            position += 1
        command_line = COMMANDS[command]
        options, position = _read_options(words, position, command_line, stop_at_word=False)
    except _Declined:
        return None
    options[command_line.rest] = tuple(words[position:])
    return Invocation(command, global_options, options)


def _read_options(words: list[str], position: int, command_line: CommandLine,
                  stop_at_word: bool) -> tuple[dict[str, Any], int]:
    """Read options from `position`; return them and where the rest begins (after a `--`).

    With `stop_at_word` (the global options) the first word that is not one of them ends
    the reading, as click's group hands it and the rest to the command.
    """
    values: dict[str, Any] = {option.parameter: option.default for option in command_line.options}
    spelled = command_line.by_spelling()
    while position < len(words):
        word = words[position]
        if word == "--":
            return values, position + (0 if stop_at_word else 1)
        name, equals, attached = word.partition("=")
        option = spelled.get(name)
        if (option is None or (equals and option.kind == FLAG)) and stop_at_word:
            return values, position  # the command, or the first word of the implied `run`
        if not word.startswith("-") or word == "-" or option is None:
            raise _Declined  # a positional argument before `--`, or an option this reader does not know
        if option.kind == FLAG and not equals:
            values[option.parameter] = True
            position += 1
        elif option.kind != FLAG and (not equals or name.startswith("--")):
            if equals:
                value, position = attached, position + 1
            elif position + 1 < len(words):
                value, position = words[position + 1], position + 2
            else:
                raise _Declined  # the value is missing
            checked = _checked_value(option, value)
            values[option.parameter] = (*values[option.parameter], checked) if option.kind == REPEATED else checked
        else:
            raise _Declined
    return values, position


def _checked_value(option: Option, value: str) -> Any:
    if value.startswith("-") or not value:
        raise _Declined  # click reads these in ways of its own
    if option.choices and value not in option.choices:
        raise _Declined
    if option.kind == INTEGER:
        try:
            return int(value)
        except ValueError:
            raise _Declined from None
    return value


def carry_out(invocation: Invocation) -> int:
    """Run the invocation as the full command line would; its exit code, failures reported alike."""
    from opencode_sandbox.cli.actions import apply_global_flags, run_project, shell_in_project
    from opencode_sandbox.cli.errors import run_reported
    from opencode_sandbox.cli.terminal import terminal_console

    console = terminal_console()

    def command() -> int:
        opener = apply_global_flags(console, **invocation.global_options)
        if invocation.command == "shell":
            return shell_in_project(opener, **invocation.options)
        return run_project(opener, **invocation.options)

    return run_reported(command, console)
