"""The `secrets.env` files that hold secrets' values on the host, and reading them."""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox.core.secrets import parse_values_file
from opencode_sandbox.errors import ConfigError, UsageError

VALUES_FILE = "secrets.env"


def values_files(config_dir: Path, slug: str) -> list[Path]:
    """The `secrets.env` files in lookup order: the project's, then the user's."""
    return [config_dir / slug / VALUES_FILE, config_dir / VALUES_FILE]


def read_values(path: Path) -> dict[str, str]:
    """The values in `path` (none when it does not exist); refused when others may read it."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ConfigError(f"{path}: cannot read the secrets file: {reason}",
                          hint="fix its permissions or encoding (UTF-8), or remove it") from None
    if mode & 0o077:
        raise UsageError(f"{path} can be read or changed by other users (mode {mode & 0o777:o}); its secrets are "
                         "not used", hint=f"run `chmod 600 {path}`")
    try:
        return parse_values_file(text)
    except ValueError as error:
        where, _, what = str(error).partition(": ")
        raise ConfigError(f"{path}:{where.removeprefix('line ')}: {what}",
                          hint="write one NAME=value a line; lines starting with # are comments") from None
