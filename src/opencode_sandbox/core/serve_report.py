"""What a silent `opencode serve` is doing, from what the VM's /proc shows: its processes, and
the connections and name lookups it waits on."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from opencode_sandbox.core.records import Record

TCP_STATES = {"01": "established", "02": "connecting, no answer yet", "03": "connecting, answered"}
"""The states of /proc/net/tcp worth naming; a listening or closing socket is not a wait."""
DNS_PORT = 53


class Waiting(Record):
    protocol: str
    address: str
    port: int
    state: str

    def describe(self) -> str:
        where = f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"
        if self.port == DNS_PORT:
            return f"a name lookup at {where}"
        return f"{self.protocol} {where} ({self.state})"


def _address(hex_address: str) -> str:
    """An address as /proc/net writes it: 32-bit words in the host's (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[index:index + 4][::-1] for index in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def connections(table: str, protocol: str) -> list[Waiting]:
    """The outgoing connections of one /proc/net table (tcp, tcp6, udp, udp6) that wait or talk."""
    found: list[Waiting] = []
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[2] or fields[0] == "sl":
            continue
        remote, state = fields[2], fields[3]
        address, _, port = remote.partition(":")
        try:
            where, number = _address(address), int(port, 16)
        except ValueError:
            continue
        if number == 0:
            continue  # not connected anywhere: a listening or unbound socket
        if protocol.startswith("udp"):
            found.append(Waiting("udp", where, number, "sent"))
        elif state in TCP_STATES:
            found.append(Waiting("tcp", where, number, TCP_STATES[state]))
    return [each for each in found if not ipaddress.ip_address(each.address).is_loopback]


ANSWERED = ("200", "401")
"""What /global/health answers in the VM, without the password, once the server serves."""


def answers_inside(status: str | None) -> bool:
    return status in ANSWERED


def summary(processes: str, waiting: Iterable[Waiting], printed_nothing: bool, inside: str | None = None) -> str:
    """The lines added to a start failure: what the process printed, whether it answers inside the
    VM (`inside`: the HTTP status it gave there), what it waits on, its processes."""
    lines: list[str] = []
    if printed_nothing:
        lines.append("opencode serve has printed nothing: it never got as far as listening.")
    if answers_inside(inside):
        lines.append(f"It answers inside the VM (HTTP {inside} on 127.0.0.1:4096), but not on the port the runtime "
                     "publishes on the host: the runtime does not forward that port to it.")
    waits = list(dict.fromkeys(each.describe() for each in waiting))
    if waits:
        lines.append("It waits on the network: " + "; ".join(waits) + ".")
    listed = [line for line in processes.splitlines() if line.strip()]
    if listed:
        lines.append("Its processes in the VM:")
        lines += [f"  {line}" for line in listed]
    return "\n".join(lines)


def hint_for(waiting: Sequence[Waiting], inside: str | None = None) -> str | None:
    """What to try when the wait is on the network, or the port between the host and the VM."""
    if answers_inside(inside):
        return ("see docs/troubleshooting.md, \"opencode serve did not answer\": the runtime's port forwarding; "
                "`opencode-sandbox doctor` checks the runtime")
    if not waiting:
        return None
    return ("the VM cannot reach what opencode fetches at start: check the network policy "
            "(`opencode-sandbox network log`) and the host's connection, or see "
            "docs/troubleshooting.md, \"opencode serve did not answer\"")
