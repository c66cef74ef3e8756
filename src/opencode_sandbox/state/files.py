"""Small YAML files written atomically with private permissions."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        os.chmod(path, DIR_MODE)


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it.

    A reader sees the old text or the new, never a part. `durable=False` skips the fsync, for
    files that describe running processes: a crash that could tear them ends those processes too.
    """
    ensure_private_dir(path.parent)
    # O_EXCL on a random name, as tempfile.mkstemp does; tempfile itself loads shutil and random.
    temporary = path.parent / f".{path.name}.{os.urandom(6).hex()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(text)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_yaml(path: Path, data: dict[str, Any], durable: bool = True) -> None:
    """Written in JSON's notation, which YAML reads too: the files stay YAML for people,
    while the launcher reads them without loading a YAML parser on every start."""
    import json

    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", durable)


class UnreadableState(Exception):
    """A state file that exists but cannot be used."""


def read_yaml_mapping(path: Path) -> dict[str, Any] | None:
    """The mapping in `path`, None when it does not exist; UnreadableState when corrupt."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise UnreadableState(str(error)) from None
    import json

    try:
        data = json.loads(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise UnreadableState(f"malformed YAML: {str(error).splitlines()[0]}") from None
    if data is None:
        raise UnreadableState("the file is empty")
    if not isinstance(data, dict):
        raise UnreadableState("expected a mapping")
    return data
