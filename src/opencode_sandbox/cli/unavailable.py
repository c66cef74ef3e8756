"""Commands whose capability this version does not ship yet."""

from __future__ import annotations

from typing import NoReturn

from opencode_sandbox.errors import NotAvailableYet


def not_available(command: str) -> NoReturn:
    raise NotAvailableYet(
        f"'{command}' is not available yet in this version of opencode-sandbox",
        hint="see 'opencode-sandbox --help' for the commands that work",
    )
