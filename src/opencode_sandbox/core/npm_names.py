"""npm's rule for a package's name, `name` or `@scope/name`: what the updater's state and an agent
of the user's own may name, read without loading any agent's profile."""

from __future__ import annotations

import re

_PACKAGE = re.compile(r"^(@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*$")
_LENGTH = 214


def is_package_name(text: str) -> bool:
    return len(text) <= _LENGTH and bool(_PACKAGE.match(text))
