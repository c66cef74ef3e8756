"""Turning `docker inspect` documents into the runtime's own types (pure functions)."""

from __future__ import annotations

import signal
from collections.abc import Mapping
from datetime import UTC, datetime

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, SandboxStatus, VolumeInfo

if TYPE_CHECKING:
    from typing import Any

VOLUME_KIND = "docker"

# The keep-alive main process only ends when it is told to: a clean exit or one of the
# signals `docker stop`/`docker kill` send means someone stopped the sandbox on purpose.
_DELIBERATE_EXIT_CODES = frozenset({0, 128 + signal.SIGTERM, 128 + signal.SIGKILL})


def parse_time(value: object) -> datetime | None:
    """Docker's RFC 3339 timestamps (nanoseconds, `Z`) as aware UTC; None for the zero time."""
    if not isinstance(value, str) or not value or value.startswith("0001-01-01"):
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    if "." in text:
        head, _, rest = text.partition(".")
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def container_status(state: Mapping[str, Any]) -> SandboxStatus:
    status = str(state.get("Status", "")).lower()
    if status == "running":
        return SandboxStatus.RUNNING
    if status == "created":
        return SandboxStatus.CREATED
    if status == "restarting":
        return SandboxStatus.STARTING
    if status == "paused":
        return SandboxStatus.PAUSED
    if status == "removing":
        return SandboxStatus.DRAINING
    if status == "dead":
        return SandboxStatus.CRASHED
    if status == "exited":
        deliberate = (
            not state.get("OOMKilled") and not state.get("Error") and state.get("ExitCode") in _DELIBERATE_EXIT_CODES
        )
        return SandboxStatus.STOPPED if deliberate else SandboxStatus.CRASHED
    return SandboxStatus.UNKNOWN


def labels_of(document: Mapping[str, Any]) -> dict[str, str]:
    config = document.get("Config")
    raw = config.get("Labels") if isinstance(config, Mapping) else document.get("Labels")
    if not isinstance(raw, Mapping):
        return {}
    return {str(key): str(value) for key, value in raw.items()}


def container_name(document: Mapping[str, Any]) -> str:
    return str(document.get("Name", "")).lstrip("/")


def sandbox_info(document: Mapping[str, Any]) -> SandboxInfo:
    state = document.get("State") or {}
    config = document.get("Config") or {}
    created = parse_time(document.get("Created"))
    moments = [
        moment
        for moment in (
            created,
            parse_time(state.get("StartedAt")),
            parse_time(state.get("FinishedAt")),
        )
        if moment is not None
    ]
    return SandboxInfo(
        name=container_name(document),
        status=container_status(state),
        image=str(config.get("Image", "")),
        created_at=created,
        last_activity_at=max(moments) if moments else None,
        labels=labels_of(document),
    )


def volume_info(document: Mapping[str, Any]) -> VolumeInfo:
    return VolumeInfo(
        name=str(document.get("Name", "")),
        kind=VOLUME_KIND,
        size_bytes=None,
        created_at=parse_time(document.get("CreatedAt")),
        labels=labels_of(document),
    )


def image_info(document: Mapping[str, Any], reference: str) -> ImageInfo:
    size = document.get("Size")
    return ImageInfo(
        reference=reference,
        digest=str(document.get("Id", "")),
        size_bytes=int(size) if isinstance(size, int | float) else None,
        created_at=parse_time(document.get("Created")),
        labels=labels_of(document),
    )


def published_host_port(document: Mapping[str, Any], guest_port: int) -> int | None:
    """The host port bound on 127.0.0.1 for a guest TCP port of a running container."""
    return published_port_map(document).get(guest_port)


def published_port_map(document: Mapping[str, Any]) -> dict[int, int]:
    """Each guest TCP port of a running container bound on 127.0.0.1, and its host port."""
    settings = document.get("NetworkSettings") or {}
    found: dict[int, int] = {}
    for port, bindings in sorted((settings.get("Ports") or {}).items()):
        guest, _, protocol = str(port).partition("/")
        for binding in bindings or []:
            if (protocol == "tcp" and guest.isdigit() and binding.get("HostIp") == "127.0.0.1"
                    and str(binding.get("HostPort", "")).isdigit()):
                found.setdefault(int(guest), int(binding["HostPort"]))
    return found
