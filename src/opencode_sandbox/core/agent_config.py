"""What of the user's agent configuration the VM may get: an agent's settings (Claude Code's, Gemini
CLI's, Qwen Code's, pi's, Droid's, Copilot's), Codex's `config.toml`, the `.env` files Gemini CLI and
Qwen Code read, pi's `models.json`, Crush's `crush.json` and `crushrc`, Cline's `providers.json` and
the MCP settings of Droid, Cline and Copilot can hold credentials (an `env` block, a bearer token, a
provider's key, an MCP server's headers), and a value copied into the VM is the agent's to read and
send anywhere. Any entry whose name says it is a
credential, and any environment entry that is a secret, stays on the host.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping

from opencode_sandbox.core.records import Record

CREDENTIAL = re.compile(
    r"(^|[_\-.])(api[_\-]?key|key|token|secret|password|passwd|credentials?|bearer[_\-]?token|authorization|auth)$"
    r"|secret|password|bearer",
    re.IGNORECASE,
)
"""A name that says its value is a credential: `GITHUB_TOKEN`, `api_key`, `experimental_bearer_token`,
`AWS_SECRET_ACCESS_KEY`, `Authorization`. `MAX_THINKING_TOKENS` is none."""
CAMEL_CASE_CREDENTIAL = re.compile(r"[a-z0-9](ApiKey|Key|Token|Secret|Password|Credentials?)$")
"""A camel-case name that says the same: `accessToken`, `awsSecretKey`. `maxOutputTokens` is none."""
NAME_OF_VARIABLE = re.compile(r"^(\$\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Z][A-Z0-9_]*)$")
"""A value that names an environment variable (Codex's `env_key = "OPENAI_API_KEY"`, Droid's
`"apiKey": "${OPENAI_API_KEY}"`), not a key."""
SHELL_REFERENCE = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
"""A value Crush expands from the environment (`"$OPENAI_API_KEY"`), not a key."""
HEADER_TABLES = ("http_headers", "headers", "extra_headers", "customHeaders")
"""Tables whose entries are request headers sent as they are: any of them can carry a key."""
CLAUDE_SETTINGS = ".claude/settings.json"
CODEX_CONFIG = ".codex/config.toml"
GEMINI_SETTINGS = ".gemini/settings.json"
GEMINI_ENV = ".gemini/.env"
QWEN_SETTINGS = ".qwen/settings.json"
QWEN_ENV = ".qwen/.env"
ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.\-]*)\s*[=:]")
"""An assignment of a `.env` file (`NAME=value`, `export NAME=value`, `NAME: value`)."""
PI_SETTINGS = ".pi/agent/settings.json"
PI_MODELS = ".pi/agent/models.json"
CRUSH_CONFIG = ".config/crush/crush.json"
CRUSH_RC = ".config/crush/crushrc"
CRUSH_HEADER_OPTIONS = ("--header", "--extra-header")
"""`crushrc` options whose values are request headers: any of them can carry a key."""
JSON_CONFIGS = (
    ".factory/settings.json", ".factory/mcp.json",
    ".cline/data/settings/providers.json", ".cline/data/settings/cline_mcp_settings.json",
    ".copilot/settings.json", ".copilot/mcp-config.json",
)
"""Droid's, Cline's and Copilot's JSON files that can hold a credential, screened as Claude Code's settings are."""


class Screened(Record):
    data: bytes | None
    """What the VM gets; None: nothing (a file that cannot be screened is not copied)."""
    left_out: tuple[str, ...]
    """The entries kept on the host, by their path in the file (`env.GITHUB_TOKEN`)."""


def is_credential(name: str, secret_names: frozenset[str] = frozenset()) -> bool:
    return name in secret_names or bool(CREDENTIAL.search(name)) or bool(CAMEL_CASE_CREDENTIAL.search(name))


def _credentials(node: object, path: str, secret_names: frozenset[str],
                 reference: re.Pattern[str] = NAME_OF_VARIABLE) -> Iterator[str]:
    """The paths of the credential entries below `node`: a named one holding text that is no
    `reference` to a variable, an environment entry that is one or a secret, every entry of a header
    table; a list's items by their index."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _credentials(item, f"{path}.{index}" if path else str(index), secret_names, reference)
        return
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        where = f"{path}.{key}" if path else str(key)
        if str(key) in HEADER_TABLES and isinstance(value, Mapping) and value:
            yield where
        elif isinstance(value, list):
            yield from _credentials(value, where, secret_names, reference)
        elif isinstance(value, Mapping):
            inside_env = str(key) == "env"
            for name, entry in value.items() if inside_env else ():
                if not isinstance(entry, Mapping) and is_credential(str(name), secret_names):
                    yield f"{where}.{name}"
            yield from _credentials({name: entry for name, entry in value.items() if isinstance(entry, Mapping)}
                                    if inside_env else value, where, secret_names, reference)
        elif isinstance(value, str) and is_credential(str(key), secret_names) and not reference.match(value):
            yield where


def _drop(document: dict[str, object], path: str) -> None:
    *parents, last = path.split(".")
    node: object = document
    for part in parents:
        if isinstance(node, list):
            node = node[int(part)] if part.isdigit() and int(part) < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def json_settings(data: bytes, secret_names: frozenset[str], reference: re.Pattern[str] = NAME_OF_VARIABLE) -> Screened:
    """A JSON configuration without its credentials, the rest as the user wrote it: the settings of
    Claude Code, Gemini CLI, Qwen Code and pi, pi's models."""
    try:
        document = json.loads(data)
    except ValueError:
        return Screened(None, ("the whole file: it is not JSON",))
    if not isinstance(document, dict):
        return Screened(data, ())
    found = tuple(_credentials(document, "", secret_names, reference))
    if not found:
        return Screened(data, ())
    for path in found:
        _drop(document, path)
    return Screened(json.dumps(document, indent=2).encode() + b"\n", found)


def codex_config(data: bytes, secret_names: frozenset[str]) -> Screened:
    """Codex's configuration as it is, or nothing when it holds a credential: TOML is read here,
    never written, so a file with one stays on the host whole."""
    import tomllib  # read only where there is a Codex configuration: it loads `typing`

    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return Screened(None, ("the whole file: it is not TOML",))
    found = tuple(_credentials(document, "", secret_names))
    return Screened(None, found) if found else Screened(data, ())


def crush_config(data: bytes, secret_names: frozenset[str]) -> Screened:
    """Crush's `crush.json` without its credentials; `$NAME` is expanded by Crush from the VM's
    environment, where a secret is a placeholder."""
    return json_settings(data, secret_names, SHELL_REFERENCE)


def crush_rc(data: bytes, secret_names: frozenset[str]) -> Screened:
    """Crush's `crushrc` as it is, or nothing when it holds a credential: a shell script is read
    here, never rewritten, so a file with one stays on the host whole. A credential is a header
    (`--header`, `--extra-header`), or an option or assignment whose name says it is one (`--api-key`,
    `export GITHUB_TOKEN=...`) holding anything but `$NAME`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Screened(None, ("the whole file: it is not text",))
    found: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a quote or an escape that goes on to the next line
            words = line.split()
        found += [f"line {number}: {entry}" for entry in _shell_credentials(words, secret_names)]
    return Screened(None, tuple(found)) if found else Screened(data, ())


def _shell_credentials(words: list[str], secret_names: frozenset[str]) -> Iterator[str]:
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else ""
        if word in CRUSH_HEADER_OPTIONS:
            yield f"{word} {following}".strip()
        elif word == "--env" and is_credential(following, secret_names):
            value = words[index + 2] if index + 2 < len(words) else ""
            if not SHELL_REFERENCE.match(value):
                yield f"--env {following}"
        elif word.startswith("--") and is_credential(word[2:].replace("-", "_"), secret_names):
            if not SHELL_REFERENCE.match(following):
                yield word
        elif "=" in word and not word.startswith("-"):
            name, _, value = word.partition("=")
            if is_credential(name, secret_names) and value and not SHELL_REFERENCE.match(value):
                yield name


def dotenv(data: bytes, secret_names: frozenset[str]) -> Screened:
    """A `.env` file without the assignments of a credential (`GEMINI_API_KEY=...`), a quoted value
    over several lines included, the rest as the user wrote it."""
    try:
        lines = data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return Screened(None, ("the whole file: it is not text",))
    kept: list[str] = []
    found: list[str] = []
    open_quote = ""
    dropping = False
    for line in lines:
        if open_quote:  # inside a value that an earlier line opened
            if open_quote in line:
                open_quote = ""
        elif (assignment := ENV_LINE.match(line)) is not None:
            dropping = is_credential(assignment.group(1), secret_names)
            if dropping:
                found.append(assignment.group(1))
            value = line[assignment.end():].strip()
            if value[:1] in ("'", '"', "`") and value.count(value[0]) == 1:
                open_quote = value[0]
        else:
            dropping = False
        if not dropping:
            kept.append(line)
    if not found:
        return Screened(data, ())
    return Screened("".join(kept).encode(), tuple(found))


SCREENS: dict[str, Callable[[bytes, frozenset[str]], Screened]] = {
    CLAUDE_SETTINGS: json_settings,
    CODEX_CONFIG: codex_config,
    GEMINI_SETTINGS: json_settings,
    GEMINI_ENV: dotenv,
    QWEN_SETTINGS: json_settings,
    QWEN_ENV: dotenv,
    PI_SETTINGS: json_settings,
    PI_MODELS: json_settings,
    CRUSH_CONFIG: crush_config,
    CRUSH_RC: crush_rc,
    **{path: json_settings for path in JSON_CONFIGS},
}
