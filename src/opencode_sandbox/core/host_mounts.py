"""Host folders and files mounted into the VM (the `mounts` key). Pure: the written entries and
the guest paths they may take; whether a source exists is the services' to check.

An entry is written as Docker writes a bind mount, `HOST_PATH:GUEST_PATH[:ro|:rw]`, read-only
unless it ends in `:rw`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from typing import Any

OWN_FOLDERS = ("/workspace", "/home/dev", "/tmp")
"""The checkout, the VM's home and its scratch space: the tool's own, never a mount's target."""
SYSTEM_FOLDERS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys",
                  "/dev", "/run", "/var", "/boot", "/root")
_FORMAT = "write it as HOST_PATH:GUEST_PATH, with :ro (the default) or :rw at the end"


class HostMount(Record):
    source: Path
    """The host path, `~` expanded; relative ones are made absolute by the loader."""
    target: str
    """An absolute, normalised guest path."""
    readonly: bool = True
    written: str = ""

    def relative_to(self, base: Path) -> HostMount:
        return self if self.source.is_absolute() else self._replace(source=base / self.source)

    def describe(self) -> str:
        return f"{self.source} -> {self.target} ({'ro' if self.readonly else 'rw'})"


def parse_mount(entry: object) -> HostMount:
    """One written entry; ValueError names it and says what is wrong."""
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"'{entry}' is not a mount; {_FORMAT}")
    written = entry.strip()
    parts = written.split(":")
    readonly = True
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        readonly = parts.pop() == "ro"
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f"'{written}' is not a mount; {_FORMAT}")
    source, target = parts
    if "," in written:
        raise ValueError(f"'{written}': a path with a comma cannot be mounted; mount a folder above it, "
                         "or a link to it without a comma")
    return HostMount(Path(source).expanduser(), _checked_target(written, target), readonly, written)


def _checked_target(written: str, target: str) -> str:
    if not target.startswith("/"):
        raise ValueError(f"'{written}': the guest path '{target}' must be absolute, such as /mnt/data")
    normal = posixpath.normpath(target)
    normal = "/" + normal.lstrip("/")  # normpath keeps a leading '//'
    for folder in (*OWN_FOLDERS, *SYSTEM_FOLDERS):
        if normal == folder or normal.startswith(folder + "/"):
            what = "the tool's own" if folder in OWN_FOLDERS else "a system folder"
            raise ValueError(f"'{written}': {folder} is {what}; mount it elsewhere, such as /mnt{normal}")
        if folder.startswith(normal.rstrip("/") + "/"):
            raise ValueError(f"'{written}': {normal} holds {folder}, which a mount there would hide; "
                             "choose a folder of its own, such as /mnt/data")
    return normal


def parse_mounts(value: Any) -> tuple[HostMount, ...]:
    """The key's list (or, from an environment variable, one entry per comma-free `;`)."""
    items = value.split(";") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueError(f"expected a list of mounts; {_FORMAT}")
    mounts = tuple(parse_mount(item) for item in items)
    refuse_shared_targets(mounts)
    return mounts


def refuse_shared_targets(mounts: Sequence[HostMount]) -> None:
    seen: dict[str, str] = {}
    for mount in mounts:
        if mount.target in seen:
            raise ValueError(f"'{seen[mount.target]}' and '{mount.written}' both mount on {mount.target}; "
                             "give each its own guest path")
        seen[mount.target] = mount.written
