"""What of the user's agent configuration the VM may get: Claude Code's `settings.json`, Codex's
`config.toml`, Droid's `settings.json` and `mcp.json`, Cline's `providers.json` and MCP settings and
Copilot's `settings.json` and `mcp-config.json` can hold credentials (an `env` block, a bearer token,
a provider's `apiKey`, an MCP server's headers), and a value copied into the VM is the agent's to read
and send anywhere. Any entry whose name says it is a
credential, and any environment entry that is a secret, stays on the host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping

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
HEADER_TABLES = ("http_headers", "headers")
"""Tables whose entries are request headers sent as they are: any of them can carry a key."""
CLAUDE_SETTINGS = ".claude/settings.json"
CODEX_CONFIG = ".codex/config.toml"
JSON_CONFIGS = (
    ".factory/settings.json", ".factory/mcp.json",
    ".cline/data/settings/providers.json", ".cline/data/settings/cline_mcp_settings.json",
    ".copilot/settings.json", ".copilot/mcp-config.json",
)
"""The other agents' JSON files that can hold a credential, screened as Claude Code's settings are."""


class Screened(Record):
    data: bytes | None
    """What the VM gets; None: nothing (a file that cannot be screened is not copied)."""
    left_out: tuple[str, ...]
    """The entries kept on the host, by their path in the file (`env.GITHUB_TOKEN`)."""


def is_credential(name: str, secret_names: frozenset[str] = frozenset()) -> bool:
    return name in secret_names or bool(CREDENTIAL.search(name)) or bool(CAMEL_CASE_CREDENTIAL.search(name))


def _credentials(node: object, path: str, secret_names: frozenset[str]) -> Iterator[str]:
    """The paths of the credential entries below `node`: a named one holding text, an environment
    entry that is one or a secret, every entry of a header table; a list's items by their index
    (Droid's `customModels.0.apiKey`)."""
    if isinstance(node, list):
        node = {str(index): item for index, item in enumerate(node)}
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        where = f"{path}.{key}" if path else str(key)
        if str(key) in HEADER_TABLES and isinstance(value, Mapping) and value:
            yield where
        elif isinstance(value, list):
            yield from _credentials(value, where, secret_names)
        elif isinstance(value, Mapping):
            inside_env = str(key) == "env"
            for name, entry in value.items() if inside_env else ():
                if not isinstance(entry, Mapping) and is_credential(str(name), secret_names):
                    yield f"{where}.{name}"
            yield from _credentials({name: entry for name, entry in value.items() if isinstance(entry, Mapping)}
                                    if inside_env else value, where, secret_names)
        elif isinstance(value, str) and is_credential(str(key), secret_names) and not NAME_OF_VARIABLE.match(value):
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


def json_settings(data: bytes, secret_names: frozenset[str]) -> Screened:
    """An agent's JSON settings without their credentials, the rest as the user wrote it."""
    try:
        document = json.loads(data)
    except ValueError:
        return Screened(None, ("the whole file: it is not JSON",))
    if not isinstance(document, dict):
        return Screened(data, ())
    found = tuple(_credentials(document, "", secret_names))
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


SCREENS = {CLAUDE_SETTINGS: json_settings, CODEX_CONFIG: codex_config,
           **{path: json_settings for path in JSON_CONFIGS}}
