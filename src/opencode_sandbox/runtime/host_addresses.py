"""The host's own addresses that lie outside the private ranges: what the `public` network profile
must name to keep the host out of the VM's reach, since a "public" address may be the host's own
(a server with a public IP). Read from the kernel's tables, without a dependency."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from opencode_sandbox.core.egress import IpAddress, private_range_of

_FIB_TRIE = Path("/proc/net/fib_trie")
_IF_INET6 = Path("/proc/net/if_inet6")


def host_public_addresses(fib_trie: Path = _FIB_TRIE, if_inet6: Path = _IF_INET6) -> frozenset[IpAddress]:
    """Every local address of the host outside the private ranges; none when a table cannot be read."""
    found: set[IpAddress] = set()
    with contextlib.suppress(OSError):
        found.update(_local_ipv4(fib_trie.read_text()))
    with contextlib.suppress(OSError):
        found.update(_local_ipv6(if_inet6.read_text()))
    return frozenset(address for address in found if private_range_of(address) is None)


def _local_ipv4(table: str) -> Iterable[ipaddress.IPv4Address]:
    """`/proc/net/fib_trie` names each address on a `|-- A.B.C.D` line; a `/32 host LOCAL` line
    under it says the host holds it."""
    last = ""
    for line in table.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:]
        elif text == "/32 host LOCAL" and last:
            yield ipaddress.IPv4Address(last)


def _local_ipv6(table: str) -> Iterable[ipaddress.IPv6Address]:
    """`/proc/net/if_inet6`: the address as 32 hex digits first on each line."""
    for line in table.splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            yield ipaddress.IPv6Address(int(fields[0], 16))

