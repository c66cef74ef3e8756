"""Handing a click command its application context, opened once the command's flags are read."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.actions import AppOpener

if TYPE_CHECKING:
    from opencode_sandbox.app import App

P = ParamSpec("P")
R = TypeVar("R")


def pass_app(command: Callable[Concatenate[App, P], R]) -> Callable[P, R]:
    """Like `click.pass_obj`, with the context the global flags open. Every command opens it, so
    a bad configuration stops each one before it does anything."""

    @functools.wraps(command)
    def with_app(*args: P.args, **kwargs: P.kwargs) -> R:
        return command(opener().open(), *args, **kwargs)

    return with_app


def opener() -> AppOpener:
    """What the global flags of the running command line set up."""
    found = click.get_current_context().find_object(AppOpener)
    if found is None:
        raise RuntimeError("a command ran outside the opencode-sandbox group")
    return found
