"""Questions to the user, asked through the console's asker (`cli/terminal.py` asks on the
terminal); without a terminal (or with --yes), or without an asker, the default answer is taken."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:  # the warm path loads no `typing`
    from collections.abc import Sequence
    from typing import Protocol

    from opencode_sandbox.ui.console import Console

    class Asker(Protocol):
        def choose(self, question: str, choices: Sequence[str], default: str) -> str: ...
        def confirm(self, question: str, default: bool) -> bool: ...


def choose(console: Console, question: str, choices: Sequence[str], default: str, interactive: bool) -> str:
    if not interactive or console.asker is None:
        return default
    return console.asker.choose(question, choices, default)


def confirm(console: Console, question: str, default: bool, interactive: bool) -> bool:
    if not interactive or console.asker is None:
        return default
    return console.asker.confirm(question, default)
