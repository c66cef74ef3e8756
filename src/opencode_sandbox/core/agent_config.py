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

from opencode_sandbox.core.agent_config_files import (
    CLAUDE_SETTINGS,
    CODEX_CONFIG,
    CRUSH_CONFIG,
    CRUSH_RC,
    GEMINI_ENV,
    GEMINI_SETTINGS,
    JSON_CONFIGS,
    PI_MODELS,
    PI_SETTINGS,
    QWEN_ENV,
    QWEN_SETTINGS,
)
from opencode_sandbox.core.credential_text import credential_in, credential_line, is_credential
from opencode_sandbox.core.records import Record

KEY_TABLE = re.compile(r"^(api[_\-]?keys|keys|tokens|secrets|credentials)$", re.IGNORECASE)
"""A table of keys by provider (`"apiKeys": {"openai": ...}`): each text in it may be one."""
NAME_OF_VARIABLE = re.compile(r"^(\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*"
                              r"|[A-Z][A-Z0-9]*_[A-Z0-9_]+)$")
"""A value that names an environment variable (Codex's `env_key = "OPENAI_API_KEY"`, Droid's
`"apiKey": "${OPENAI_API_KEY}"`, Gemini CLI's `"$GITHUB_TOKEN"`), not a key. A name without `_` is
taken for a key: capitals and digits alone are an access key's shape too (`AKIA...`)."""
PLAIN_WORD = re.compile(r"^[a-z][a-z\-]{0,15}$")
"""A value that is a word in small letters (`"apiKey": "ollama"`, `"none"`, `"not-needed"`): the stand-in
a local model's provider asks for, not a key."""
SHELL_REFERENCE = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
"""A value Crush expands from the environment (`"$OPENAI_API_KEY"`), not a key."""
HEADER_TABLES = ("http_headers", "headers", "extra_headers", "customHeaders")
"""Tables whose entries are request headers sent as they are: any of them can carry a key."""
ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.\-]*)\s*[=:]")
"""An assignment of a `.env` file (`NAME=value`, `export NAME=value`, `NAME: value`)."""
CRUSH_HEADER_OPTIONS = ("--header", "--extra-header")
"""`crushrc` options whose values are request headers: any of them can carry a key."""
HEADER_OPTIONS = (*CRUSH_HEADER_OPTIONS, "-H")
"""Options whose values are request headers, in any program's arguments (`mcp-remote --header`, curl's `-H`)."""


NESTED_TOO_DEEP = "the whole file: it nests deeper than Python can read"


class Screened(Record):
    data: bytes | None
    """What the VM gets; None: nothing (a file that cannot be screened is not copied)."""
    left_out: tuple[str, ...]
    """The entries kept on the host, by their path in the file (`env.GITHUB_TOKEN`)."""


def _text_holds_one(value: object) -> bool:
    """Text of any name that holds a credential by its shape (`core/credential_text.py`): a header line
    in a variable, a key in a command, a URL's password."""
    return isinstance(value, str) and credential_in(value) is not None


Path = tuple[str | int, ...]
"""Where an entry sits in a document: its keys and list indexes from the top, never joined into text
(a key may hold a dot: an MCP server named by its URL, a provider by its host)."""


def _shown(path: Path) -> str:
    return ".".join(str(part) for part in path)


def _is_header_table(key: str, value: object) -> bool:
    """A table of request headers (`headers`, `http_headers`, `customHeaders`, `requestHeaders`, a list
    of `{name, value}` pairs): any of them can carry a key."""
    return (key in HEADER_TABLES or key.lower().endswith("headers")) and isinstance(value, Mapping | list) \
        and bool(value)


def _holds_a_key(key: str, value: object, secret_names: frozenset[str], reference: re.Pattern[str]) -> bool:
    """Whether the entry `key: value` is a credential: a credential's name holding text that is no
    `reference` to a variable, a number or a list. A table under such a name is screened entry by
    entry (`_credentials`); a yes or no is none."""
    if not is_credential(key, secret_names) or value in (None, "", [], {}) or isinstance(value, bool | Mapping):
        return False
    return not (isinstance(value, str) and (reference.match(value) or PLAIN_WORD.match(value)))


def _looks_like_a_key(value: object, reference: re.Pattern[str]) -> bool:
    """Text below a credential's name that could be the key itself (`"apiKey": {"value": "sk-..."}`):
    8 characters or more with a digit and without a space, and no reference to a variable."""
    return isinstance(value, str) and len(value) >= 8 and any(c.isdigit() for c in value) \
        and not any(c.isspace() for c in value) and not reference.match(value)


def _option_takes_a_key(item: object, secret_names: frozenset[str]) -> bool:
    """A command-line option among a program's arguments whose value is a key (`--api-key`) or a
    request header (`--header`, `-H`)."""
    if not isinstance(item, str) or not item.startswith("-"):
        return False
    option = item.partition("=")[0]
    return option in HEADER_OPTIONS or is_credential(option.lstrip("-").replace("-", "_"), secret_names)


def _assigns_one(item: object, secret_names: frozenset[str]) -> bool:
    """An argument that sets a credential's variable inline (`docker run -e GITHUB_TOKEN=...`)."""
    if not isinstance(item, str) or item.startswith("-"):
        return False
    name, assigned, value = item.partition("=")
    return bool(assigned and value) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None \
        and is_credential(name, secret_names) and not SHELL_REFERENCE.match(value) \
        and not NAME_OF_VARIABLE.match(value)


def _credentials(node: object, path: Path, secret_names: frozenset[str],
                 reference: re.Pattern[str] = NAME_OF_VARIABLE, below_a_credential: bool = False) -> Iterator[Path]:
    """The paths of the credential entries below `node`: a named one holding anything but a
    `reference` to a variable (`_holds_a_key`), text that looks like a key anywhere below a
    credential's name, an environment entry that is one or a secret, every header table; a list's
    items by their index."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            after_an_option = index > 0 and _option_takes_a_key(node[index - 1], secret_names)
            if (below_a_credential and _looks_like_a_key(item, reference)) or after_an_option \
                    or (_option_takes_a_key(item, secret_names) and "=" in str(item)) \
                    or _assigns_one(item, secret_names) or _text_holds_one(item):
                yield (*path, index)
            else:
                yield from _credentials(item, (*path, index), secret_names, reference, below_a_credential)
        return
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        where = (*path, str(key))
        if _is_header_table(str(key), value) or _holds_a_key(str(key), value, secret_names, reference) \
                or (below_a_credential and _looks_like_a_key(value, reference)) or _text_holds_one(value):
            yield where
        elif isinstance(value, list):
            yield from _credentials(value, where, secret_names, reference, below_a_credential)
        elif isinstance(value, Mapping):
            inside_env = str(key) == "env"
            for name, entry in value.items() if inside_env else ():
                named = is_credential(str(name), secret_names) and not (
                    isinstance(entry, str) and reference.match(entry))
                if not isinstance(entry, Mapping) and (named or _text_holds_one(entry)):
                    yield (*where, str(name))
            below = below_a_credential or is_credential(str(key), secret_names) or bool(KEY_TABLE.match(str(key)))
            yield from _credentials({name: entry for name, entry in value.items() if isinstance(entry, Mapping)}
                                    if inside_env else value, where, secret_names, reference, below)


def _drop(document: object, path: Path) -> None:
    *parents, last = path
    node = document
    for part in parents:
        if isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        else:
            return
    if isinstance(node, dict) and isinstance(last, str):
        node.pop(last, None)
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = None


def json_settings(data: bytes, secret_names: frozenset[str], reference: re.Pattern[str] = NAME_OF_VARIABLE) -> Screened:
    """A JSON configuration without its credentials, the rest as the user wrote it: the settings of
    Claude Code, Gemini CLI, Qwen Code and pi, pi's models. The result is screened again, and a file
    that still holds a credential then is not copied at all."""
    try:
        document = json.loads(data)
        found = tuple(_credentials(document, (), secret_names, reference))
        if not found:
            return Screened(data, ())
        for path in found:
            _drop(document, path)
        stayed = any(True for _ in _credentials(document, (), secret_names, reference))
    except ValueError:
        return Screened(None, ("the whole file: it is not JSON",))
    except RecursionError:
        return Screened(None, (NESTED_TOO_DEEP,))
    if stayed:
        return Screened(None, (*map(_shown, found), "the whole file: a credential stayed in it"))
    return Screened(json.dumps(document, indent=2).encode() + b"\n", tuple(map(_shown, found)))


def codex_config(data: bytes, secret_names: frozenset[str]) -> Screened:
    """Codex's configuration as it is, or nothing when it holds a credential: TOML is read here,
    never written, so a file with one stays on the host whole."""
    import tomllib  # read only where there is a Codex configuration: it loads `typing`

    try:
        document = tomllib.loads(data.decode("utf-8"))
        found = tuple(map(_shown, _credentials(document, (), secret_names)))
    except ValueError:  # not UTF-8, not TOML, or a number past Python's digits limit
        return Screened(None, ("the whole file: it is not TOML",))
    except RecursionError:
        return Screened(None, (NESTED_TOO_DEEP,))
    return Screened(None, found) if found else Screened(data, ())


def crush_config(data: bytes, secret_names: frozenset[str]) -> Screened:
    """Crush's `crush.json` without its credentials; `$NAME` is expanded by Crush from the VM's
    environment, where a secret is a placeholder."""
    return json_settings(data, secret_names, SHELL_REFERENCE)


def crush_rc(data: bytes, secret_names: frozenset[str]) -> Screened:
    """Crush's `crushrc` as it is, or nothing when it may hold a credential: a shell script is read
    here, never rewritten, so a file with one stays on the host whole. A credential is a header
    (`--header`, `-H`, `--extra-header`, with its value after `=` too), an option or an assignment
    whose name says it is one (`--api-key`, `export GITHUB_TOKEN=...`, `+=`) holding anything but
    `$NAME`, a credential's name set any other way (`read`, `printf -v`), and any assignment of text
    that looks like a key, whatever its name (`K=sk-...`, then `$K`)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Screened(None, ("the whole file: it is not text",))
    found: list[str] = []
    for number, line in _logical_lines(text):
        if not line.strip():
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a quote or an escape that goes on to the next line
            words = line.split()
        named = [f"line {number}: {entry}" for entry in _shell_credentials(words, secret_names)]
        if not named and (shape := credential_in(line)) is not None:
            named.append(f"line {number}: {shape}")
        found += named
    return Screened(None, tuple(found)) if found else Screened(data, ())


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """The script's lines as the shell reads them, a line that ends in `\\` joined with the next, each
    by the number of its first line."""
    pending, first = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            first = number
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        yield first, pending + line
        pending = ""
    if pending:
        yield first, pending


def _shell_credentials(words: list[str], secret_names: frozenset[str]) -> Iterator[str]:
    index = 0
    while index < len(words):
        word = words[index]
        option, attached, attached_value = word.partition("=")
        following = attached_value if attached else (words[index + 1] if index + 1 < len(words) else "")
        consumed = 1 if attached else 2
        if option in HEADER_OPTIONS:
            yield f"{option} {following}".strip()
        elif option == "--env" and is_credential(following.partition("=")[0], secret_names):
            value = following.partition("=")[2] or (words[index + 2] if index + 2 < len(words) else "")
            consumed += 0 if "=" in following else 1
            if not SHELL_REFERENCE.match(value):
                yield f"--env {following.partition('=')[0]}"
        elif option.startswith("-") and is_credential(option.lstrip("-").replace("-", "_"), secret_names):
            if not SHELL_REFERENCE.match(following):
                yield option
        elif attached and not word.startswith("-"):
            name, value = option.removesuffix("+"), attached_value
            if value and not SHELL_REFERENCE.match(value) and (
                    is_credential(name, secret_names) or _looks_like_a_key(value, SHELL_REFERENCE)):
                yield name
            consumed = 1
        elif is_credential(word, secret_names) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word):
            yield f"{word}, set other than by `$NAME`"
            consumed = 1
        else:
            consumed = 1
        index += consumed


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
            if _unescaped(line, open_quote):
                open_quote = ""
        elif (assignment := ENV_LINE.match(line)) is not None:
            value = line[assignment.end():].strip()
            dropping = is_credential(assignment.group(1), secret_names) or credential_in(value) is not None
            if dropping:
                found.append(assignment.group(1))
            if value[:1] in ("'", '"', "`") and _unescaped(value, value[0]) == 1:
                open_quote = value[0]
        else:
            dropping = False
        if not dropping:
            kept.append(line)
    # Read again line by line, as a reader that knows no quotes (or strips a byte order mark) would:
    # an assignment of a credential that the screen took for part of a value keeps the file home.
    missed = [match.group(1) for line in kept if (match := ENV_LINE.match(line.replace("\ufeff", "")))
              and is_credential(match.group(1), secret_names)]
    if missed:
        return Screened(None, (*found, *(f"{name}, in a line read otherwise" for name in missed)))
    if (shape := credential_line("".join(kept))) is not None:  # a value's later lines, read as a reader would
        return Screened(None, (*found, f"the whole file: {shape}"))
    if not found:
        return Screened(data, ())
    return Screened("".join(kept).encode(), tuple(found))


def _unescaped(text: str, quote: str) -> int:
    """How many times `quote` is in `text` not after a backslash: dotenv's readers end a quoted value
    at such a quote alone."""
    return sum(1 for index, character in enumerate(text)
               if character == quote and (index == 0 or text[index - 1] != "\\"))


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
