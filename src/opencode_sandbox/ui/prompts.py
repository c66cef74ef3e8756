"""Questions to the user; without a terminal (or with --yes) the default answer is taken."""

from __future__ import annotations

from collections.abc import Sequence


def choose(question: str, choices: Sequence[str], default: str, interactive: bool) -> str:
    if not interactive:
        return default
    import click

    answer: str = click.prompt(
        question, type=click.Choice(list(choices)), default=default, show_choices=True, err=True
    )
    return answer


def confirm(question: str, default: bool, interactive: bool) -> bool:
    if not interactive:
        return default
    import click

    return click.confirm(question, default=default, err=True)
