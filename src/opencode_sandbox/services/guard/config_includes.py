"""Files of the checkout that the host's git reads as its own configuration: the `include.path`
and `includeIf.*.path` of the repository's config, resolved as git does (from the folder of the
file that names them). A VM that writes one writes the host's git configuration, `core.fsmonitor`
and `core.hooksPath` included, so each is guarded like a file the host runs.

The repository's own config is the user's, never the VM's: it is read here as plain text, with no
git process, and only the keys that name files are looked at."""

from __future__ import annotations

import os
import re
from pathlib import Path

_SECTION = re.compile(r'^\s*\[\s*(include|includeif)(?:\s+"[^"]*")?\s*\]', re.IGNORECASE)
_OTHER_SECTION = re.compile(r"^\s*\[")
_PATH = re.compile(r'^\s*path\s*=\s*(.*?)\s*$', re.IGNORECASE)
CONFIG_READ_LIMIT = 1 << 20


def included_in_checkout(root: Path, config_files: tuple[Path, ...]) -> tuple[str, ...]:
    """The included files that lie in the checkout (outside `.git`), relative to its top."""
    found: list[str] = []
    for config in config_files:
        for value in _include_paths(config):
            target = Path(os.path.expanduser(value))
            resolved = os.path.normpath(target if target.is_absolute() else config.parent / target)
            relative = os.path.relpath(resolved, root)
            if relative != "." and not relative.startswith("..") and relative.split(os.sep)[0] != ".git":
                found.append(relative.replace(os.sep, "/"))
    return tuple(dict.fromkeys(found))


def _include_paths(config: Path) -> list[str]:
    try:
        with config.open("rb") as handle:
            text = handle.read(CONFIG_READ_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return []
    values: list[str] = []
    inside = False
    for line in text.splitlines():
        if _SECTION.match(line):
            inside = True
        elif _OTHER_SECTION.match(line):
            inside = False
        elif inside and (match := _PATH.match(line)):
            value = match.group(1).split(" #")[0].split(" ;")[0].strip()
            values.append(value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value)
    return values
