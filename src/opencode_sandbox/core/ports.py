"""Guest TCP ports published on the host's loopback (the `ports` key and `--publish`). Pure."""

from __future__ import annotations

from collections.abc import Iterable

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from typing import Any

DAEMON_PORT = 4096
"""opencode serve's port in the VM, which the tool publishes itself."""
_FORMAT = "write it as GUEST_PORT or HOST_PORT:GUEST_PORT, such as 3000 or 8080:3000"


class PublishedPort(Record):
    guest: int
    host: int | None = None
    """None: a free port is picked when the VM is created."""

    @property
    def written(self) -> str:
        return str(self.guest) if self.host is None else f"{self.host}:{self.guest}"


def _number(entry: str, text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"'{entry}' is not a port; {_FORMAT}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"'{entry}': {port} is outside 1 to 65535")
    return port


def parse_port(entry: object) -> PublishedPort:
    """One written entry; ValueError names it and says what is wrong."""
    if isinstance(entry, bool) or not isinstance(entry, str | int):
        raise ValueError(f"'{entry}' is not a port; {_FORMAT}")
    written = str(entry).strip()
    host_text, colon, guest_text = written.rpartition(":")
    guest = _number(written, guest_text)
    host = _number(written, host_text) if colon else None
    if guest == DAEMON_PORT:
        raise ValueError(f"'{written}': guest port {DAEMON_PORT} is opencode serve's, which the tool publishes "
                         "itself; have the server listen on another port")
    return PublishedPort(guest, host)


def parse_ports(value: Any) -> tuple[PublishedPort, ...]:
    """The key's list (or, from an environment variable, one entry per comma)."""
    items = value.split(",") if isinstance(value, str) else [value] if isinstance(value, int) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of ports; {_FORMAT}")
    return merged(parse_port(item) for item in items)


def merged(ports: Iterable[PublishedPort]) -> tuple[PublishedPort, ...]:
    """The ports in order, each once; a guest or host port given twice in two ways is an error."""
    by_guest: dict[int, PublishedPort] = {}
    hosts: dict[int, PublishedPort] = {}
    for port in ports:
        earlier = by_guest.get(port.guest)
        if earlier == port:
            continue
        if earlier is not None:
            raise ValueError(f"guest port {port.guest} is published twice ('{earlier.written}' and "
                             f"'{port.written}'); keep one")
        if port.host is not None and port.host in hosts:
            raise ValueError(f"host port {port.host} is given twice ('{hosts[port.host].written}' and "
                             f"'{port.written}'); keep one")
        by_guest[port.guest] = port
        if port.host is not None:
            hosts[port.host] = port
    return tuple(by_guest.values())


def checkout_refusal(ports: Iterable[PublishedPort]) -> str | None:
    """Why a set of ports may not come from the checkout's own file, or None when it may."""
    fixed = [port.written for port in ports if port.host is not None]
    if not fixed:
        return None
    return (f"{', '.join(fixed)} names a host port, which the agent could use to take a port a host "
            "service listens on when that service is down")
