"""What msb's policy engine refused, read back from the sandbox's own log
(`msb logs --source system --json --debug`): one JSON entry per line, whose text names the
refusal and whose fields name the destination."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from opencode_sandbox.runtime.types import Refusal

_REFUSALS = (
    ("secret violation", "tcp", "a secret's placeholder, to a host it is not for"),
    ("DNS query denied", "dns", "the name is not allowed"),
    ("DNS resolver denied", "dns", "the resolver is not allowed"),
    ("denied by strict hostname policy", "tcp", "the host name could not be checked"),
    ("denied by domain policy", "tcp", "the host name is not allowed"),
    ("denied by default policy", "tcp", "not allowed"),
    ("ICMP echo denied", "icmp", "not allowed"),
    ("ICMPv6 echo denied", "icmp", "not allowed"),
    ("denied by network policy", "tcp", "not allowed"),
    ("denied by policy", "tcp", "not allowed"),
)
_NAME_FIELDS = ("domain", "host", "hostname", "sni", "authority", "qname", "query", "name")
_ADDRESS_FIELDS = ("dst", "dst_addr", "destination", "remote", "remote_addr", "addr", "ip")
_PORT_FIELDS = ("dst_port", "port")
_TIME_FIELDS = ("ts", "timestamp", "time")
_TEXT_FIELDS = ("body", "message", "msg", "line", "text")
_ADDRESS_AND_PORT = re.compile(r"\[?((?:\d{1,3}\.){3}\d{1,3}|[0-9a-fA-F:]*:[0-9a-fA-F:]+)\]?:(\d{1,5})\b")


def refusals_of_log(text: str) -> list[Refusal]:
    """The refusals in msb's log lines, one per destination, protocol and port."""
    found: dict[tuple[str, str, int | None], Refusal] = {}
    for entry in _entries(text):
        refusal = _refusal(entry)
        if refusal is None:
            continue
        key = (refusal.destination, refusal.protocol, refusal.port)
        earlier = found.get(key)
        if earlier is not None:
            last_seen = max((moment for moment in (earlier.last_seen, refusal.last_seen) if moment), default=None)
            refusal = earlier._replace(attempts=earlier.attempts + 1, last_seen=last_seen)
        found[key] = refusal
    return list(found.values())


def _entries(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            yield _flattened(entry)


def _flattened(entry: Mapping[str, Any], into: dict[str, Any] | None = None) -> dict[str, Any]:
    flat = {} if into is None else into
    for key, value in entry.items():
        if isinstance(value, Mapping):
            _flattened(value, flat)
        else:
            flat.setdefault(key, value)
    return flat


def _refusal(entry: Mapping[str, Any]) -> Refusal | None:
    text = " ".join(str(entry[field]) for field in _TEXT_FIELDS if field in entry)
    matched = next(((protocol, reason) for phrase, protocol, reason in _REFUSALS if phrase in text), None)
    if matched is None:
        return None
    protocol, reason = matched
    destination, port = _destination(entry, text)
    if destination is None:
        return None
    return Refusal(destination, protocol, port, 1, _moment(entry), reason)


def _destination(entry: Mapping[str, Any], text: str) -> tuple[str | None, int | None]:
    port = next((int(entry[field]) for field in _PORT_FIELDS if str(entry.get(field, "")).isdigit()), None)
    name = next((str(entry[field]) for field in _NAME_FIELDS if entry.get(field)), None)
    address = next((str(entry[field]) for field in _ADDRESS_FIELDS if entry.get(field)), None)
    if address is not None:
        match = _ADDRESS_AND_PORT.fullmatch(address)
        if match:
            address, port = match.group(1), port or int(match.group(2))
    elif name is None:
        match = _ADDRESS_AND_PORT.search(text)
        if match:
            address, port = match.group(1), port or int(match.group(2))
    return name or address, port


def _moment(entry: Mapping[str, Any]) -> datetime | None:
    for field in _TIME_FIELDS:
        value = entry.get(field)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None
