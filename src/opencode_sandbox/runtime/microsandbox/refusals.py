"""What msb's policy engine refused, read back from the sandbox's own log.

`msb logs --source system --json --debug NAME` prints one JSON object per line: `t`, the time, and
`d`, a log line such as `DEBUG microsandbox_network::engine::dns::forwarder: DNS query denied by
network policy domain=example.org`. msb records what it refuses by name (DNS answers, host names
it checks on intercepted or plain HTTP, secrets); a connection it refuses by address alone gets a
TCP reset and no record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime

from opencode_sandbox.runtime.types import Refusal

_NETWORK_TARGET = "microsandbox_network::"
_REFUSALS = (  # a phrase of msb's log line, the protocol refused, the reason when the policy cannot tell
    ("secret violation", "tcp", "a secret's placeholder, sent where it may not go"),
    ("DNS query denied by network policy", "dns", ""),
    ("DNS resolver denied by network policy", "dns", ""),
    ("denied by strict hostname policy", "tcp", "its host name could not be read to be checked"),
    ("egress denied by domain policy", "tcp", ""),
    ("egress denied by default policy", "tcp", ""),
)
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_ADDRESS_AND_PORT = re.compile(r"\[?([0-9A-Fa-f:.]+?)\]?:(\d{1,5})")


def refusals_of_log(text: str) -> list[Refusal]:
    """The refusals in msb's log, one per destination, protocol and port, with how many times."""
    found: dict[tuple[str, str, int | None], Refusal] = {}
    for moment, line in _lines(text):
        refusal = _refusal(line, moment)
        if refusal is None:
            continue
        key = (refusal.destination, refusal.protocol, refusal.port)
        earlier = found.get(key)
        if earlier is not None:
            refusal = refusal._replace(attempts=earlier.attempts + 1)
        found[key] = refusal
    return list(found.values())


def _lines(text: str) -> Iterator[tuple[datetime | None, str]]:
    for raw in text.splitlines():
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and _NETWORK_TARGET in str(entry.get("d", "")):
            yield _moment(entry.get("t")), str(entry["d"]).strip()


def _refusal(line: str, moment: datetime | None) -> Refusal | None:
    matched = next(((phrase, protocol, reason) for phrase, protocol, reason in _REFUSALS if phrase in line), None)
    if matched is None:
        return None
    _, protocol, reason = matched
    fields = {key: value.strip('"') for key, value in _FIELD.findall(line)}
    name = fields.get("domain") or fields.get("sni") or fields.get("host") or fields.get("authority")
    address, port = _address_and_port(fields.get("dst", ""))
    destination = name or address
    if not destination:
        return None
    return Refusal(destination, protocol, None if protocol == "dns" else port, 1, moment, reason)


def _address_and_port(text: str) -> tuple[str | None, int | None]:
    match = _ADDRESS_AND_PORT.fullmatch(text)
    return (match.group(1), int(match.group(2))) if match else (None, None)


def _moment(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
