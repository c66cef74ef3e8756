"""Secrets: environment variables whose real value the VM never holds. Inside the VM the variable
holds a placeholder; the runtime puts the real value in its place only in requests to the hosts
the secret names. Pure: the settings' `secrets` key and the `secrets.env` files' text.

The key maps a variable's name to its hosts, or to its hosts and the request header fields the
value may be put in:

    secrets:
      OPENAI_API_KEY: [api.openai.com]
      ANTHROPIC_API_KEY: {hosts: [api.anthropic.com], headers: [x-api-key]}

In an environment variable: `OPENAI_API_KEY=api.openai.com;ANTHROPIC_API_KEY[x-api-key]=api.anthropic.com`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.egress import EgressRule, SecretRule, parse_rule

if TYPE_CHECKING:
    from typing import Any

_NAME = r"^[A-Z_][A-Z0-9_]*$"
_HEADER = r"^[a-z0-9!#$%&'*+.^_`|~-]+$"
_TEXT_ENTRY = r"^\s*(?P<name>[^\[=\s]*)\s*(?:\[(?P<headers>[^\]]*)\])?\s*=(?P<hosts>.*)$"
_OWN_PREFIX = "OPENCODE_SANDBOX_"


def parse_secret_name(name: object) -> str:
    if not isinstance(name, str) or not re.match(_NAME, name):
        raise ValueError(f"'{name}' is not a secret's variable name; use capitals, digits and _, "
                         "as in OPENAI_API_KEY")
    if name.startswith(_OWN_PREFIX):
        raise ValueError(f"'{name}' is one of opencode-sandbox's own settings, not a secret")
    return name


def parse_secret_host(text: object) -> EgressRule:
    """A host a secret may be sent to: a name or `*.domain`, with at least two labels."""
    rule = parse_rule(text if isinstance(text, str) else "")
    if rule.network is not None:
        raise ValueError(f"'{rule.text}': a secret is sent to host names, not addresses; name the host")
    if rule.port is not None:
        raise ValueError(f"'{rule.text}': a secret's host takes no port (the value is sent over HTTPS)")
    return rule


def _headers(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError("'headers' must be a non-empty list of request header names, such as [authorization]")
    headers = []
    for item in items:
        header = item.strip().lower() if isinstance(item, str) else ""
        if not re.match(_HEADER, header):
            raise ValueError(f"'{item}' is not a request header name, such as authorization or x-api-key")
        headers.append(header)
    return tuple(headers)


def _hosts(name: str, value: object) -> tuple[EgressRule, ...]:
    items = [item for item in value.split(",") if item.strip()] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError(f"{name}: list the hosts its value may be sent to, such as [api.openai.com]")
    return tuple(parse_secret_host(item) for item in items)


def parse_secret(name: object, value: object) -> SecretRule:
    """One entry of the `secrets` mapping: a host list, or `{hosts: [...], headers: [...]}`."""
    checked = parse_secret_name(name)
    if isinstance(value, Mapping):
        unknown = sorted(str(key) for key in value if key not in ("hosts", "headers"))
        if unknown:
            raise ValueError(f"{checked}: unknown field {', '.join(unknown)}; a secret has hosts and headers")
        headers = _headers(value["headers"]) if "headers" in value else ()
        return SecretRule(checked, _hosts(checked, value.get("hosts")), headers)
    return SecretRule(checked, _hosts(checked, value))


def parse_secrets(value: Any) -> tuple[SecretRule, ...]:
    """The `secrets` key: a mapping, or the environment variable's `NAME=host,host;...` text."""
    if isinstance(value, str):
        return _parse_text(value)
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of variable names to host lists, such as {OPENAI_API_KEY: "
                         "[api.openai.com]}")
    return tuple(parse_secret(name, hosts) for name, hosts in value.items())


def _parse_text(text: str) -> tuple[SecretRule, ...]:
    secrets: list[SecretRule] = []
    for entry in filter(str.strip, text.split(";")):
        match = re.match(_TEXT_ENTRY, entry)
        if match is None:
            raise ValueError(f"'{entry.strip()}': write NAME=host,host or NAME[header,header]=host, "
                             "entries separated by ';'")
        name = parse_secret_name(match["name"])
        if any(secret.name == name for secret in secrets):
            raise ValueError(f"{name} is given twice")
        headers = _headers(match["headers"]) if match["headers"] is not None else ()
        secrets.append(SecretRule(name, _hosts(name, match["hosts"].strip()), headers))
    return tuple(secrets)


def parse_values_file(text: str) -> dict[str, str]:
    """A `secrets.env` file: `NAME=value` lines, blank lines and `#` comments. The value is taken
    as written, up to the end of its line; one pair of surrounding quotes is removed. ValueError
    names the line of a malformed entry."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, equals, value = stripped.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name[len("export "):].strip()
        if not equals or not re.match(_NAME, name):
            raise ValueError(f"line {number}: expected NAME=value, with NAME in capitals, digits and _")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name] = value
    return values


def render_values_file(values: Mapping[str, str]) -> str:
    """The text of a `secrets.env` file that `parse_values_file` reads back as `values`."""
    lines = ["# opencode-sandbox secrets: NAME=value, readable only by you (chmod 600)"]
    for name, value in values.items():
        if not re.match(_NAME, name) or "\n" in value or "\r" in value:
            raise ValueError(f"{name}: cannot be written as one NAME=value line")
        lines.append(f'{name}="{value}"')  # the reader removes one pair of quotes, whatever is inside
    return "\n".join(lines) + "\n"
