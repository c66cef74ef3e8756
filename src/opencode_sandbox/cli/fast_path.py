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
from opencode_sandbox.core.records import Record
from opencode_sandbox.ui.console import LOG_LEVEL_NAMES

if TYPE_CHECKING:
    from typing import Any

RUNTIME_NAMES = ("microsandbox", "docker")
COMPLETION_VARIABLE = "_OPENCODE_SANDBOX_COMPLETE"


class Invocation(Record):
    command: str
    """`run` or `shell`."""
    global_options: dict[str, Any]
    options: dict[str, Any]
    """The command's parameters, named as its function's arguments."""


class _Grammar(Record):
    flags: dict[str, str]
    """Option spelling -> parameter set to True."""
    valued: dict[str, str]
    """Option spelling -> parameter that takes the next word."""
    defaults: dict[str, Any]
    rest: str
    """The parameter that receives the words after `--`."""


_GLOBAL = _Grammar(
    flags={"-y": "assume_yes", "--yes": "assume_yes", "-q": "quiet", "--quiet": "quiet"},
    valued={"--log-level": "log_level", "--runtime": "runtime"},
    defaults={"assume_yes": False, "quiet": False, "log_level": None, "runtime": None},
    rest="",
)
_COMMON_FLAGS = {"-r": "rebuild", "--rebuild": "rebuild", "-n": "dry_run", "--dry-run": "dry_run"}
_MACHINE_SIZE = {"-c": "cpus", "--cpus": "cpus", "-m": "memory", "--memory": "memory"}
_COMMANDS = {
    "run": _Grammar(
        flags={**_COMMON_FLAGS, "-s": "serve_only", "--serve-only": "serve_only"},
        valued={**_MACHINE_SIZE, "-w": "worktree", "--worktree": "worktree"},
        defaults={"worktree": None, "rebuild": False, "dry_run": False, "cpus": None, "memory": None,
                  "serve_only": False},
        rest="opencode_args",
    ),
    "shell": _Grammar(
        flags={**_COMMON_FLAGS, "--root": "root"},
        valued=_MACHINE_SIZE,
        defaults={"root": False, "rebuild": False, "dry_run": False, "cpus": None, "memory": None},
        rest="command",
    ),
}


class _Declined(Exception):
    """The line is not one this reader takes; the full parser reads it."""


def recognise(argv: Sequence[str], environ: Mapping[str, str]) -> Invocation | None:
    """The invocation `argv` asks for, or None when the full parser must read it."""
    if COMPLETION_VARIABLE in environ:
        return None  # the shell asks click for completions
    words = list(argv)
    try:
        global_options, position = _read_options(words, 0, _GLOBAL, stop_at_word=True)
        command = "run"
        if position < len(words) and words[position] in _COMMANDS:
            command = words[position]
            position += 1
        grammar = _COMMANDS[command]
        options, position = _read_options(words, position, grammar, stop_at_word=False)
    except _Declined:
        return None
    options[grammar.rest] = tuple(words[position:])
    return Invocation(command, global_options, options)


def _read_options(words: list[str], position: int, grammar: _Grammar,
                  stop_at_word: bool) -> tuple[dict[str, Any], int]:
    """Read options from `position`; return them and where the rest begins (after a `--`).

    With `stop_at_word` (the global options) the first word that is not one of them ends
    the reading, as click's group hands it and the rest to the command.
    """
    values = dict(grammar.defaults)
    while position < len(words):
        word = words[position]
        if word == "--":
            return values, position + (0 if stop_at_word else 1)
        name, equals, attached = word.partition("=")
        known = (not equals and word in grammar.flags) or name in grammar.valued
        if not known and stop_at_word:
            return values, position  # the command, or the first word of the implied `run`
        if not word.startswith("-") or word == "-":
            raise _Declined  # a positional argument before `--`
        if not equals and word in grammar.flags:
            values[grammar.flags[word]] = True
            position += 1
        elif name in grammar.valued and (not equals or name.startswith("--")):
            if equals:
                value, position = attached, position + 1
            elif position + 1 < len(words):
                value, position = words[position + 1], position + 2
            else:
                raise _Declined  # the value is missing
            parameter = grammar.valued[name]
            values[parameter] = _checked_value(parameter, value)
        else:
            raise _Declined
    return values, position


def _checked_value(parameter: str, value: str) -> Any:
    if value.startswith("-") or not value:
        raise _Declined  # click reads these in ways of its own
    if parameter == "log_level" and value not in LOG_LEVEL_NAMES:
        raise _Declined
    if parameter == "runtime" and value not in RUNTIME_NAMES:
        raise _Declined
    if parameter == "cpus":
        try:
            return int(value)
        except ValueError:
            raise _Declined from None
    return value


def carry_out(invocation: Invocation) -> int:
    """Run the invocation as the full command line would; its exit code, failures reported alike."""
    from opencode_sandbox.cli.actions import apply_global_flags, run_project, shell_in_project
    from opencode_sandbox.cli.errors import run_reported
    from opencode_sandbox.ui.console import Console

    console = Console()

    def command() -> int:
        opener = apply_global_flags(console, **invocation.global_options)
        if invocation.command == "shell":
            return shell_in_project(opener, **invocation.options)
        return run_project(opener, **invocation.options)

    return run_reported(command, console)
