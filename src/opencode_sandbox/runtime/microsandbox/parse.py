"""Turning msb's JSON and text output into the runtime interface's own types."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, SandboxStatus, VolumeInfo

_MIB = 1024 * 1024
_FRACTION = re.compile(r"\.(\d+)")


def parse_status(value: object) -> SandboxStatus:
    try:
        return SandboxStatus(str(value).lower())
    except ValueError:
        return SandboxStatus.UNKNOWN


def parse_time(value: object) -> datetime | None:
    """msb prints RFC 3339 with nanoseconds; the SDK gives milliseconds since the epoch."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000.0, tz=UTC)
    text = str(value).replace("Z", "+00:00")
    text = _FRACTION.sub(lambda match: "." + match.group(1)[:6].ljust(6, "0"), text, count=1)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(key): "" if item is None else str(item) for key, item in value.items()}


def sandbox_info(inspected: Mapping[str, Any]) -> SandboxInfo:
    """From `msb inspect NAME --format json`."""
    config = inspected.get("config") or {}
    image = config.get("image") or {}
    reference = ""
    if isinstance(image, Mapping):
        for source in image.values():
            if isinstance(source, Mapping) and "reference" in source:
                reference = str(source["reference"])
    return SandboxInfo(
        name=str(inspected.get("name", "")),
        status=parse_status(inspected.get("status")),
        image=reference,
        created_at=parse_time(inspected.get("created_at")),
        last_activity_at=parse_time(inspected.get("updated_at") or inspected.get("created_at")),
        labels=_string_map(config.get("labels")),
    )


def published_host_port(inspected: Mapping[str, Any], guest_port: int) -> int | None:
    """The host port a guest TCP port is published on, from the running or stored config."""
    return published_port_map(inspected).get(guest_port)


def published_port_map(inspected: Mapping[str, Any]) -> dict[int, int]:
    """Each published guest TCP port and its host port, from the running config, else the stored one."""
    for key in ("active_config", "config"):
        config = inspected.get(key)
        if not isinstance(config, Mapping):
            continue
        network = config.get("network") or {}
        found: dict[int, int] = {}
        for port in network.get("ports") or []:
            if str(port.get("protocol", "tcp")) == "tcp" and int(port.get("host_port", 0)) > 0:
                found.setdefault(int(port.get("guest_port", -1)), int(port["host_port"]))
        if found:
            return found
    return {}


def named_volumes_of(inspected: Mapping[str, Any]) -> set[str]:
    """The named volumes a sandbox's configuration mounts."""
    config = inspected.get("config") or {}
    return {
        str(mount["name"])
        for mount in config.get("mounts") or []
        if isinstance(mount, Mapping) and mount.get("type") == "Named" and "name" in mount
    }


def env_values_of(inspected: Mapping[str, Any]) -> list[str]:
    """The values of a sandbox's environment (`config.env`: `{"key": .., "value": ..}` items)."""
    config = inspected.get("config") or {}
    return [
        str(item["value"])
        for item in config.get("env") or []
        if isinstance(item, Mapping) and item.get("value") is not None
    ]


def image_info(inspected: Mapping[str, Any]) -> ImageInfo:
    """From `msb image inspect REF --format json`; the digest is the config digest."""
    config = inspected.get("config") or {}
    size = inspected.get("size_bytes")
    return ImageInfo(
        reference=str(inspected.get("reference", "")),
        digest=str(config.get("digest") or ""),
        size_bytes=int(size) if isinstance(size, int) else None,
        created_at=parse_time(inspected.get("created_at")),
        labels=_string_map(config.get("labels")),
    )


def volume_info(listed: Mapping[str, Any], labels: Mapping[str, str]) -> VolumeInfo:
    """From one entry of `msb volume list --format json` plus the labels from inspect."""
    kind = str(listed.get("kind", ""))
    size: int | None = None
    if listed.get("capacity_bytes") is not None:
        size = int(listed["capacity_bytes"])
    elif listed.get("quota_mib") is not None:
        size = int(listed["quota_mib"]) * _MIB
    return VolumeInfo(
        name=str(listed.get("name", "")),
        kind=kind,
        size_bytes=size,
        created_at=parse_time(listed.get("created_at")),
        labels=dict(labels),
    )


def volume_inspect_fields(text: str) -> dict[str, str]:
    """`msb volume inspect NAME` prints `Key:   value` lines (it has no JSON format)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if separator and key.strip() and not key.startswith(" "):
            fields[key.strip().lower()] = value.strip()
    return fields


def parse_label_list(text: str) -> dict[str, str]:
    """The `Labels:` value of `msb volume inspect`: `a=b, c=d`, or `-` for none."""
    if text in ("", "-"):
        return {}
    labels: dict[str, str] = {}
    for item in text.split(", "):
        key, _, value = item.partition("=")
        if key:
            labels[key] = value
    return labels
