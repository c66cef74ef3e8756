"""Copying the user's configuration of the agent (opencode's, or a terminal agent's) into the VM home,
only what changed."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.agents import DEFAULT_AGENT, AgentProfile
from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.providers import without_kept_out_keys
from opencode_sandbox.core.records import Record
from opencode_sandbox.services.regular_files import Content, read_tree

if TYPE_CHECKING:
    from opencode_sandbox.core.agent_config import Screened

__all__ = ["Content"]

VM_HOME = "/home/dev"
MAX_CONFIGURATION_BYTES = 1 << 20
"""A terminal agent's configuration file larger than this stays home: none is near it, and each is
looked at for credentials at every start."""
DEV_UID = 1000
DEV_GID = 1000
AUTH_TARGET = ".local/share/opencode/auth.json"
TOOL_FOLDER = ".opencode-sandbox"


class ProvisionSource(Record):
    host: Path
    """A file or folder on the host."""
    target: str
    """Its path relative to the VM home."""
    within: Path | None = None
    """Set for a source in the checkout, which the VM and a cloned repository write: no link from
    this folder down to `host` is followed. The user's own sources may be links they made."""
    refused: tuple[str, ...] = ()
    """Targets (files or folders) this source may not fill: a login the checkout would plant, with
    which the agent in the VM would work in the account of the repository's author."""


class Collected(Record):
    files: dict[str, Content]
    """Target path -> content."""
    skipped: list[Path]
    """What was not copied: links, devices, FIFOs and sockets are never read."""
    refused: list[str]
    """Targets a source may not fill (`ProvisionSource.refused`), which it held."""


def default_sources(home: Path, config_home: Path, data_home: Path, project_root: Path) -> list[ProvisionSource]:
    """The user's opencode config and auth, then the project's overrides merged on top."""
    return [
        ProvisionSource(config_home / "opencode", ".config/opencode"),
        ProvisionSource(data_home / "opencode" / "auth.json", AUTH_TARGET),
        ProvisionSource(data_home / "opencode" / "mcp-auth.json", ".local/share/opencode/mcp-auth.json"),
        ProvisionSource(project_root / TOOL_FOLDER / "opencode", ".config/opencode", within=project_root),
    ]


def agent_sources(profile: AgentProfile, home: Path, project_root: Path) -> list[ProvisionSource]:
    """A terminal agent's configuration from the user's home, then the checkout's own on top."""
    sources = [ProvisionSource(home / source.host, source.target) for source in profile.config]
    if profile.checkout_config is not None:
        from opencode_sandbox.core.agents.custom import KEPT_AT_HOME

        folder = project_root / TOOL_FOLDER / profile.checkout_config.host
        sources.append(ProvisionSource(folder, profile.checkout_config.target, within=project_root,
                                       refused=(*profile.logins, *KEPT_AT_HOME)))
    return sources


def sources_for_environment(project_root: Path, agent: AgentProfile | None = None) -> list[ProvisionSource]:
    """What the agent's VM gets of the user's configuration: opencode's (`agent` None), or the terminal agent's."""
    home = Path.home()
    if agent is not None and agent.name != DEFAULT_AGENT:
        sources = agent_sources(agent, home, project_root)
        _refuse_tool_folders(agent, sources, home)
        return sources
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    data_home = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
    return default_sources(home, config_home, data_home, project_root)


def _refuse_tool_folders(agent: AgentProfile, sources: list[ProvisionSource], home: Path) -> None:
    """An agent of the user's own names its configuration freely: none of it may be, or hold, one of
    this tool's folders where `XDG_*` moved them (its `secrets.env`, its state), nor what the
    configuration refuses by name (logins, `~/.ssh`, ...) when reached through a link (a dotfiles
    folder, `~/amp-config -> ~/.ssh`). Paths are compared resolved and case-folded."""
    from opencode_sandbox.core.agents import PROFILES
    from opencode_sandbox.core.agents.custom import kept_at_home
    from opencode_sandbox.errors import ConfigError
    from opencode_sandbox.paths import ToolPaths

    def resolved(path: Path) -> Path:
        return Path(os.path.realpath(path).casefold())

    protected = [(folder, f"this tool's own {folder}") for folder in ToolPaths.from_environment()]
    protected += [(home / path, f"~/{path}" + (f", {owner}'s login" if owner else ""))
                  for path, owner in kept_at_home(PROFILES)]
    kept = [(resolved(path), what) for path, what in protected]
    for source in sources:
        if source.within is not None:
            continue
        path = resolved(source.host)
        for folder, what in kept:
            if path == folder or folder.is_relative_to(path) or path.is_relative_to(folder):
                named = Path(os.path.abspath(source.host)).relative_to(home).as_posix()
                raise ConfigError(
                    f"{agent.title}: its configuration ~/{named} would copy {what} into the VM",
                    hint=f"name a narrower file or folder under 'config' of the agent '{agent.name}'",
                )


def collect_files(sources: list[ProvisionSource]) -> Collected:
    """Every regular file of each source, by target path; later sources win (the project folder
    merges on top)."""
    collected = Collected({}, [], [])
    for source in sources:
        tree = read_tree(source.host, source.within)
        for relative, content in tree.files.items():
            target = f"{source.target}/{relative}" if relative else source.target
            if any(_is_at_or_below(target, refused) for refused in source.refused):
                collected.refused.append(target)
                continue
            collected.files[target] = content
        collected.skipped.extend(source.host / relative if relative else source.host for relative in tree.skipped)
    return collected


def _is_at_or_below(target: str, folder: str) -> bool:
    """Compared case-folded: a case-insensitive file system (macOS) reads `.Codex` as `.codex`."""
    target, folder = target.casefold(), folder.casefold()
    return target == folder or target.startswith(folder.rstrip("/") + "/")


def without_secret_keys(files: Mapping[str, Content], secret_names: set[str]) -> dict[str, Content]:
    """`files` with opencode's `auth.json` left without the API keys that are secrets: the VM
    gets those as placeholders. The host's own file is never changed."""
    result = dict(files)
    logins = files.get(AUTH_TARGET)
    if logins is None or not secret_names:
        return result
    try:
        document = json.loads(logins.data)
    except ValueError:
        return result  # not opencode's logins: nothing in it can be told apart
    kept = without_kept_out_keys(document, secret_names)
    if kept is not document:
        result[AUTH_TARGET] = Content(json.dumps(kept, indent=2).encode(), logins.mode, logins.mtime)
    return result


def without_agent_credentials(files: Mapping[str, Content], secret_names: set[str],
                              every_file: bool = True) -> tuple[dict[str, Content], list[str]]:
    """`files` with the credentials left out of the terminal agents' configuration
    (`core/agent_config.py`), and what was left out, as `<file>: <entry>`. With `every_file` (a
    terminal agent's, not opencode's), every file is looked at once more, screened or copied whole
    (a skill's `.env`, a hook's script): one that holds a credential by its shape stays home."""
    from opencode_sandbox.core.agent_config_files import SCREENED

    result = dict(files)
    left_out: list[str] = []
    if not every_file and SCREENED.isdisjoint(files):
        return result, left_out  # nothing to screen: the screens and their patterns need not load
    from opencode_sandbox.core.agent_config import SCREENS

    for target, screen in SCREENS.items():
        content = files.get(target)
        if content is None:
            continue
        screened = _screened(screen, content.data, frozenset(secret_names))
        left_out += [f"~/{target}: {entry}" for entry in screened.left_out]
        if screened.data is None:
            del result[target]
        elif screened.data is not content.data:
            result[target] = Content(screened.data, content.mode, content.mtime)
    if every_file:
        for target, content in list(result.items()):
            found = _credential_in_file(target, content.data, frozenset(secret_names), screened=target in SCREENS)
            if found is not None:
                del result[target]
                left_out.append(f"~/{target}: the whole file: {found}")
    return result, left_out


def _screened(screen: Callable[[bytes, frozenset[str]], Screened], data: bytes,
              secret_names: frozenset[str]) -> Screened:
    """A screen's answer; a file it cannot read (a TOML integer of 5,000 digits) is not copied."""
    from opencode_sandbox.core.agent_config import Screened

    try:
        return screen(data, secret_names)
    except (ValueError, RecursionError, MemoryError) as error:
        return Screened(None, (f"the whole file: it cannot be read ({type(error).__name__})",))


def _credential_in_file(target: str, data: bytes, secret_names: frozenset[str], screened: bool) -> str | None:
    """Why a file copied for a terminal agent stays home, None when it may be copied: it holds a
    credential by its shape (in any way it may be read), a configuration file of its kind holds one by
    its name (a skill's `.env` or `config.json`), it is compressed or a database, or it is
    configuration larger than `MAX_CONFIGURATION_BYTES`."""
    from opencode_sandbox.core.agent_config import dotenv, json_settings
    from opencode_sandbox.core.credential_text import COMPRESSED, credential_line, is_configuration, texts_of

    if data.startswith(COMPRESSED):
        return "it is compressed or a database, which cannot be looked into"
    configuration = is_configuration(target)
    if configuration and len(data) > MAX_CONFIGURATION_BYTES:
        return f"configuration larger than {MAX_CONFIGURATION_BYTES >> 20} MiB"
    for text in texts_of(data):
        if (found := credential_line(text, configuration)) is not None:
            return found
    name = target.rsplit("/", 1)[-1].lower()
    screen = json_settings if name.endswith(".json") else dotenv if name.startswith(".env") else None
    if screen is None or screened:
        return None
    named = _screened(screen, data, secret_names)
    credentials = [entry for entry in named.left_out if not entry.startswith("the whole file: it is not")]
    return f"{', '.join(credentials)}, by name" if credentials else None


def manifest(files: Mapping[str, Content]) -> dict[str, str]:
    """Target path -> content digest (and mode), the record of what was provisioned."""
    result: dict[str, str] = {}
    for target, content in sorted(files.items()):
        result[target] = f"{sha256(content.data).hexdigest()[:32]}:{content.mode:o}"
    return result


def manifest_fingerprint(entries: Mapping[str, str]) -> str:
    return sha256(json.dumps(dict(sorted(entries.items()))).encode()).hexdigest()[:16]


def changed_files(files: Mapping[str, Content], current: Mapping[str, str],
                  provisioned: Mapping[str, str]) -> list[str]:
    return [target for target in sorted(files) if provisioned.get(target) != current[target]]


def tar_archive(files: Mapping[str, Content], targets: list[str]) -> bytes:
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
            content = files[target]
            info = tarfile.TarInfo(target)
            info.size = len(content.data)
            info.mode = content.mode
            info.mtime = content.mtime
            info.uid, info.gid, info.uname, info.gname = DEV_UID, DEV_GID, "dev", "dev"
            archive.addfile(info, io.BytesIO(content.data))
    return buffer.getvalue()



