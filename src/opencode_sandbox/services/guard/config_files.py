"""Files of the checkout that the host's git reads as configuration or runs: the files its config
includes (`include.path`, `includeIf.*.path`, and theirs in turn), the programs its settings name by
a path (a filter, a textconv, a merge driver, `core.fsmonitor`, an alias that runs a command...),
the `core.hooksPath` as written (a link in the checkout may lead git there), and what the links in
the hooks folder point at. A VM that writes one of them makes the host's git run its code, so each
is guarded like a file the host runs.

The repository's config is the user's, never the VM's: it is read here as plain text, with no git
process, and only the keys that name files are looked at."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

CONFIG_READ_LIMIT = 1 << 20
INCLUDE_DEPTH = 5
HOOKS_LISTED = 256
_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_ENTRY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*?))?\s*$")
_PROGRAM_KEYS = {("filter", "clean"), ("filter", "smudge"), ("filter", "process"), ("diff", "textconv"),
                 ("diff", "command"), ("merge", "driver"), ("core", "fsmonitor"), ("core", "sshcommand"),
                 ("core", "editor"), ("core", "pager"), ("core", "askpass"), ("gpg", "program"),
                 ("credential", "helper"), ("sequence", "editor"), ("pager", "*"), ("alias", "*")}


def named_in_config(root: Path, config_files: tuple[Path, ...], hooks: Path | None) -> tuple[str, ...]:
    """The files of the checkout (outside `.git`) the host's git reads or runs, relative to its top."""
    found: list[str] = []
    for section, key, value, origin in _entries(config_files, root):
        if (section, key) in (("include", "path"), ("includeif", "path")):
            found += _inside(root, _path(value, origin.parent))
        elif (section, key) == ("core", "hookspath"):
            found += _inside(root, _path(value, root))
        elif (section, key) in _PROGRAM_KEYS or (section, "*") in _PROGRAM_KEYS:
            program = value.lstrip("!").strip().split(" ")[0].strip("'\"")
            if "/" in program:
                found += _inside(root, _path(program, root))
    if hooks is not None:
        found += _hook_links(root, hooks)
    return tuple(dict.fromkeys(found))


def _path(value: str, base: Path) -> Path:
    target = Path(os.path.expanduser(value))
    return target if target.is_absolute() else base / target


def _inside(root: Path, path: Path) -> list[str]:
    relative = os.path.relpath(os.path.normpath(path), root)
    if relative == "." or relative.startswith("..") or relative.split(os.sep)[0] == ".git":
        return []
    return [relative.replace(os.sep, "/")]


def _hook_links(root: Path, hooks: Path) -> list[str]:
    """The files of the checkout the hooks folder's links lead to (`.git/hooks/pre-commit ->
    ../../scripts/pre-commit.sh`)."""
    try:
        names = sorted(os.listdir(hooks))[:HOOKS_LISTED]
    except OSError:
        return []
    found: list[str] = []
    for name in names:
        link = hooks / name
        if link.is_symlink():
            try:
                found += _inside(root, link.resolve())
            except (OSError, RuntimeError):
                continue
    return found


def _entries(config_files: tuple[Path, ...], root: Path) -> Iterator[tuple[str, str, str, Path]]:
    """(section, key, value, file) of each setting, lower-case names, the included files' too."""
    pending = [(path, 0) for path in config_files]
    seen: set[Path] = set()
    while pending:
        config, depth = pending.pop()
        if config in seen or depth > INCLUDE_DEPTH:
            continue
        seen.add(config)
        for section, key, value in _settings(config):
            yield section, key, value, config
            if key == "path" and section in ("include", "includeif"):
                pending.append((_path(value, config.parent), depth + 1))


def _settings(config: Path) -> Iterator[tuple[str, str, str]]:
    try:
        with config.open("rb") as handle:
            text = handle.read(CONFIG_READ_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return
    section = ""
    for raw in text.splitlines():
        line = raw
        heading = _SECTION.match(line)
        if heading:
            section, line = heading.group(1).lower().split(".")[0], heading.group(3)
        entry = _ENTRY.match(_without_comment(line))
        if entry and section:
            yield section, entry.group(1).lower(), _unquoted((entry.group(2) or "").strip())


def _without_comment(line: str) -> str:
    quoted = False
    for index, character in enumerate(line):
        if character == '"':
            quoted = not quoted
        elif character in "#;" and not quoted:
            return line[:index]
    return line


def _unquoted(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
