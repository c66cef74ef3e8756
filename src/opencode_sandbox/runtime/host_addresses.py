"""Facts of the host the network policy needs, read from its own files without a dependency.

- Its own addresses outside the private ranges: what the `public` network profile must name to
  keep the host out of the VM's reach, since a "public" address may be the host's own (a server
  with a public IP).
- Its DNS resolvers: Docker's embedded DNS server forwards the VM's lookups to them from inside
  the VM's network namespace, so under `public` a resolver at a private address (a home router, a
  company's DNS server) must stay reachable on port 53, or no name resolves.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from opencode_sandbox.core.egress import IpAddress, private_range_of

_FIB_TRIE = Path("/proc/net/fib_trie")
_IF_INET6 = Path("/proc/net/if_inet6")
_RESOLV_CONF = Path("/etc/resolv.conf")
_SYSTEMD_RESOLV_CONF = Path("/run/systemd/resolve/resolv.conf")


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



def host_resolvers(resolv_conf: Path = _RESOLV_CONF,
                   systemd_resolv_conf: Path = _SYSTEMD_RESOLV_CONF) -> frozenset[IpAddress]:
    """The resolvers Docker forwards lookups to, as it picks them: those of `/etc/resolv.conf`, or
    systemd-resolved's upstream servers when the file names only its local stub; loopback ones
    never (Docker drops them)."""
    servers = _nameservers(resolv_conf)
    if servers and all(server.is_loopback for server in servers):
        servers = _nameservers(systemd_resolv_conf)
    return frozenset(server for server in servers if not server.is_loopback)


def _nameservers(path: Path) -> list[IpAddress]:
    try:
        text = path.read_text()
    except OSError:
        return []
    found: list[IpAddress] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            with contextlib.suppress(ValueError):
                found.append(ipaddress.ip_address(fields[1].split("%", 1)[0]))
    return found
