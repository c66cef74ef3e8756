"""What an image's inspect document says about the image: its labels and its environment."""

from __future__ import annotations

from collections.abc import Mapping

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


def labels_of(document: Mapping[str, Any] | None) -> dict[str, str] | None:
    if document is None:
        return None
    return dict((document.get("Config") or {}).get("Labels") or {})


def env_of(document: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in (document.get("Config") or {}).get("Env") or []:
        name, _, value = entry.partition("=")
        env[name] = value
    return env
