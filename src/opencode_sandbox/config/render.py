"""Configuration values written back the way users write them."""

from __future__ import annotations

from datetime import timedelta
from enum import Enum
from typing import Any

from opencode_sandbox.config.keys import Key
from opencode_sandbox.core.egress import EgressRule, SecretRule
from opencode_sandbox.core.host_mounts import HostMount
from opencode_sandbox.core.ports import PublishedPort
from opencode_sandbox.core.units import format_duration


def render_value(key: Key, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, Enum):
        return str(value.value)
    if key.name == "memory" and isinstance(value, int):
        gib, rest = divmod(value, 1024**3)
        return f"{gib}G" if rest == 0 else f"{value // 1024**2}M"
    if isinstance(value, tuple) and all(isinstance(item, SecretRule) for item in value) and key.name == "secrets":
        return "{" + ", ".join(f"{item.name}: [{', '.join(item.host_texts)}]" for item in value) + "}"
    if key.name == "agents" and isinstance(value, tuple):
        return "{" + ", ".join(f"{agent.name}: {agent.package or 'install script'}" for agent in value) + "}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_item_text(item) for item in value) + "]"
    return str(value)


def _item_text(item: Any) -> str:
    if isinstance(item, EgressRule):
        return item.text
    if isinstance(item, HostMount):
        return f"{item.source}:{item.target}:{'ro' if item.readonly else 'rw'}"
    if isinstance(item, PublishedPort):
        return item.written
    return str(item)
