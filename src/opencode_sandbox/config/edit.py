"""Changing one key of a configuration file in place: the rest of the file, comments included,
stays as the user wrote it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.config.loader import read_file
from opencode_sandbox.core.egress import SecretRule
from opencode_sandbox.errors import ConfigError
from opencode_sandbox.state.files import write_atomic


def secrets_in(path: Path) -> tuple[SecretRule, ...]:
    """The secrets the file sets."""
    from opencode_sandbox.config.keys import KEYS_BY_NAME

    raw = read_file(path).get("secrets")
    if raw is None:
        return ()
    try:
        secrets: tuple[SecretRule, ...] = KEYS_BY_NAME["secrets"].read(raw.value)
    except ValueError as error:
        raise ConfigError(f"{raw.source}: invalid value for 'secrets': {error}",
                          hint="fix it first, then run the command again") from None
    return secrets


def add_secrets(path: Path, secrets: Sequence[SecretRule]) -> list[str]:
    """Add each of `secrets` not already in the file's `secrets` key; the names added. A secret
    the file already names keeps the hosts written there."""
    current = secrets_in(path)
    names = {secret.name for secret in current}
    added = [secret for secret in secrets if secret.name not in names]
    if not added:
        return []
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = _secrets_block([*current, *added])
    start, end = _key_span(text, "secrets")
    if start is None:
        text = text + ("" if not text or text.endswith("\n") else "\n") + block
    else:
        text = text[:start] + block + text[end:]
    write_atomic(path.resolve(), text)  # a symlinked file (dotfiles) stays a symlink
    return [secret.name for secret in added]


def _key_span(text: str, key: str) -> tuple[int | None, int]:
    """Where `key: value` is written in the top-level mapping of `text`."""
    import yaml

    node = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    if not isinstance(node, yaml.MappingNode):
        return None, 0
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node.start_mark.index, value_node.end_mark.index
    return None, 0


def _secrets_block(secrets: Sequence[SecretRule]) -> str:
    """Each string as a JSON string, which YAML reads alike: `*.domain` unquoted is a YAML alias."""
    lines = ["secrets:"]
    for secret in secrets:
        hosts = "[" + ", ".join(json.dumps(host) for host in secret.host_texts) + "]"
        if secret.headers:
            headers = "[" + ", ".join(json.dumps(header) for header in secret.headers) + "]"
            lines.append(f"  {secret.name}: {{hosts: {hosts}, headers: {headers}}}")
        else:
            lines.append(f"  {secret.name}: {hosts}")
    return "\n".join(lines) + "\n"
