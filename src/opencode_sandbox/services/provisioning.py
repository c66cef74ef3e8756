"""Copying the user's opencode configuration into the VM home, only what changed."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.providers import without_kept_out_keys
from opencode_sandbox.core.records import Record

VM_HOME = "/home/dev"
DEV_UID = 1000
DEV_GID = 1000
AUTH_TARGET = ".local/share/opencode/auth.json"


class Content(Record):
    """A file's content made here rather than read from the host as it is."""

    data: bytes
    mode: int
    mtime: int


Provisioned = Path | Content


class ProvisionSource(Record):
    host: Path
    """A file or folder on the host."""
    target: str
    """Its path relative to the VM home."""


def default_sources(home: Path, config_home: Path, data_home: Path, project_root: Path) -> list[ProvisionSource]:
    """The user's opencode config and auth, then the project's overrides merged on top."""
    return [
        ProvisionSource(config_home / "opencode", ".config/opencode"),
        ProvisionSource(data_home / "opencode" / "auth.json", AUTH_TARGET),
        ProvisionSource(data_home / "opencode" / "mcp-auth.json", ".local/share/opencode/mcp-auth.json"),
        ProvisionSource(project_root / ".opencode-sandbox" / "opencode", ".config/opencode"),
    ]


def sources_for_environment(project_root: Path) -> list[ProvisionSource]:
    home = Path.home()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    data_home = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
    return default_sources(home, config_home, data_home, project_root)


def _walk(source: ProvisionSource) -> Iterator[tuple[str, Path]]:
    if source.host.is_file():
        yield source.target, source.host
        return
    if not source.host.is_dir():
        return
    for folder, directories, files in os.walk(source.host):
        directories.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_file():
                relative = path.relative_to(source.host).as_posix()
                yield f"{source.target}/{relative}", path


def collect_files(sources: list[ProvisionSource]) -> dict[str, Path]:
    """Target path -> host file; later sources win (the project folder merges on top)."""
    files: dict[str, Path] = {}
    for source in sources:
        for target, path in _walk(source):
            files[target] = path
    return files


def without_secret_keys(files: Mapping[str, Path], secret_names: set[str]) -> dict[str, Provisioned]:
    """`files` with opencode's `auth.json` left without the API keys that are secrets: the VM
    gets those as placeholders. The host's own file is never changed."""
    result: dict[str, Provisioned] = dict(files)
    path = files.get(AUTH_TARGET)
    if path is None or not secret_names:
        return result
    try:
        document = json.loads(path.read_bytes())
    except ValueError:
        return result  # not opencode's logins: nothing in it can be told apart
    kept = without_kept_out_keys(document, secret_names)
    if kept is not document:
        status = path.stat()
        result[AUTH_TARGET] = Content(json.dumps(kept, indent=2).encode(), status.st_mode & 0o777,
                                      int(status.st_mtime))
    return result


def _read(source: Provisioned) -> Content:
    if isinstance(source, Content):
        return source
    status = source.stat()
    return Content(source.read_bytes(), status.st_mode & 0o777, int(status.st_mtime))


def manifest(files: Mapping[str, Provisioned]) -> dict[str, str]:
    """Target path -> content digest (and mode), the record of what was provisioned."""
    result: dict[str, str] = {}
    for target, source in sorted(files.items()):
        content = _read(source)
        result[target] = f"{sha256(content.data).hexdigest()[:32]}:{content.mode:o}"
    return result


def manifest_fingerprint(entries: Mapping[str, str]) -> str:
    return sha256(json.dumps(dict(sorted(entries.items()))).encode()).hexdigest()[:16]


def changed_files(files: Mapping[str, Provisioned], current: Mapping[str, str],
                  provisioned: Mapping[str, str]) -> list[str]:
    return [target for target in sorted(files) if provisioned.get(target) != current[target]]


def tar_archive(files: Mapping[str, Provisioned], targets: list[str]) -> bytes:
    """A tar of `targets` owned by dev, with the parent folders, to unpack in the VM home."""
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folders: set[str] = set()
        for target in targets:
            parts = target.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o700 if folder.startswith(".local") else 0o755
                    info.mtime = int(time.time())
                    info.uid, info.gid, info.uname, info.gname = DEV_UID, DEV_GID, "dev", "dev"
                    archive.addfile(info)
            content = _read(files[target])
            info = tarfile.TarInfo(target)
            info.size = len(content.data)
            info.mode = content.mode
            info.mtime = content.mtime
            info.uid, info.gid, info.uname, info.gname = DEV_UID, DEV_GID, "dev", "dev"
            archive.addfile(info, io.BytesIO(content.data))
    return buffer.getvalue()


UNPACK_COMMAND = ["tar", "-x", "--no-overwrite-dir", "-C", VM_HOME, "-f", "-"]
