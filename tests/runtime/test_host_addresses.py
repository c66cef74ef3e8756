"""The host's own public addresses, read from the kernel's tables."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from opencode_sandbox.runtime.host_addresses import host_public_addresses, host_resolvers

FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 4
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
           |-- 172.17.0.1
              /32 host LOCAL
     +-- 192.0.2.0/24 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
           |-- 198.51.100.7
              /32 host LOCAL
Local:
           |-- 192.0.2.2
              /32 host LOCAL
"""
IF_INET6 = """fe8000000000000044f243fffec1c6a0 1e4c 40 20 80 veth60c211c
fd000000000000000000000000000002 04 40 00 82     eth0
20010db8000000000000000000000042 04 40 00 80     eth0
00000000000000000000000000000001 01 80 10 80       lo
"""


def test_only_the_local_addresses_outside_the_private_ranges(tmp_path: Path) -> None:
    (tmp_path / "fib_trie").write_text(FIB_TRIE)
    (tmp_path / "if_inet6").write_text(IF_INET6)
    found = host_public_addresses(tmp_path / "fib_trie", tmp_path / "if_inet6")
    assert found == {ipaddress.ip_address("192.0.2.2"), ipaddress.ip_address("198.51.100.7"),
                     ipaddress.ip_address("2001:db8::42")}


def test_unreadable_tables_give_nothing(tmp_path: Path) -> None:
    assert host_public_addresses(tmp_path / "absent", tmp_path / "absent too") == frozenset()


def test_this_host_reads_without_failing() -> None:
    found = host_public_addresses()
    assert all(not (address.is_loopback or address.is_link_local) for address in found)


def test_resolvers_are_those_docker_forwards_to(tmp_path: Path) -> None:
    resolv_conf, systemd = tmp_path / "resolv.conf", tmp_path / "systemd-resolv.conf"
    resolv_conf.write_text("# a comment\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nnameserver 127.0.0.1\n"
                           "search example.com\noptions ndots:0\n")
    assert host_resolvers(resolv_conf, systemd) == {ipaddress.ip_address("10.255.255.53"),
                                                    ipaddress.ip_address("fe80::1")}

    resolv_conf.write_text("nameserver 127.0.0.53\noptions edns0 trust-ad\n")  # systemd-resolved's stub
    systemd.write_text("nameserver 192.168.1.1\nnameserver 2001:db8::53\n")
    assert host_resolvers(resolv_conf, systemd) == {ipaddress.ip_address("192.168.1.1"),
                                                    ipaddress.ip_address("2001:db8::53")}

    systemd.unlink()
    assert host_resolvers(resolv_conf, systemd) == frozenset()
    assert host_resolvers(tmp_path / "missing", systemd) == frozenset()
