"""Turning msb's JSON and text output into the runtime interface's own types."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, SandboxStatus, VolumeInfo

_FRACTION = r"\.(\d+)"
_SIZE = r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)"
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


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
    text = re.sub(_FRACTION, lambda match: "." + match.group(1)[:6].ljust(6, "0"), text, count=1)
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


def volume_info(name: str, fields: Mapping[str, str]) -> VolumeInfo:
    """From the fields of `msb volume inspect NAME` (`volume_inspect_fields`): its one answer
    holds the kind, the size, the creation time and the labels."""
    return VolumeInfo(
        name=name,
        kind=fields.get("kind", ""),
        size_bytes=parse_size(fields.get("capacity") or fields.get("quota") or ""),
        created_at=parse_local_time(fields.get("created", "")),
        labels=parse_label_list(fields.get("labels", "")),
    )


def parse_size(text: str) -> int | None:
    """`2.0 MiB`, `512.0 MiB`, `1.5 GiB` (as msb prints a quota or a capacity); None for `unlimited`."""
    match = re.fullmatch(_SIZE, text.strip())
    if match is None:
        return None
    return round(float(match.group(1)) * _UNITS[match.group(2)])


def parse_local_time(text: str) -> datetime | None:
    """`2026-11-29 10:47:19`, printed in the host's local time (`msb volume inspect`)."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S").astimezone(UTC)
    except ValueError:
        return None


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
