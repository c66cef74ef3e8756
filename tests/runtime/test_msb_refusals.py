"""Reading msb's records of what its policy refused. The DNS line and the others around it are
msb's own, as a booting microVM logged them in the lab (`msb logs --source system --json --debug`);
the others carry the fields msb's source gives those events (`sni`, `domain`, `dst`, `error`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from opencode_sandbox.runtime.microsandbox.refusals import refusals_of_log
from opencode_sandbox.runtime.types import Refusal


def line(text: str, moment: str = "2026-12-02T02:33:56.100Z") -> str:
    return json.dumps({"d": text + "\n", "e": None, "id": None, "s": "system", "t": moment})


DNS = "DEBUG microsandbox_network::engine::dns::forwarder: DNS query denied by network policy domain=denied.example.org"
NOISE = [
    line("DEBUG microsandbox_network::engine::icmp::relay: unprivileged ICMPv4 echo sockets unavailable — "
         "external ICMPv4 relay disabled"),
    line('DEBUG sqlx::query: summary="SELECT \\"sandbox\\".\\"id\\" …" rows_affected=1'),
    line("DEBUG msb_krun_devices::virtio::fs::server: opcode: 12"),
    "not json at all",
]


def test_a_refused_name_is_listed_once_with_its_attempts_and_last_time() -> None:
    log = "\n".join([*NOISE, line(DNS, "2026-12-02T02:33:56.100Z"), line(DNS, "2026-12-02T02:34:01.250Z")])
    assert refusals_of_log(log) == [
        Refusal("denied.example.org", "dns", None, 2, datetime(2026, 12, 2, 2, 34, 1, 250000, tzinfo=UTC), ""),
    ]


def test_names_refused_at_the_connection_keep_their_port() -> None:
    log = "\n".join([
        line("DEBUG microsandbox_network::engine::tls::proxy: TLS egress denied by domain policy "
             "sni=other.example.com dst=1.2.3.4:443"),
        line("DEBUG microsandbox_network::engine::tcp::proxy: TCP egress denied by domain policy "
             "domain=plain.example.com dst=[2001:db8::5]:8080"),
        line("DEBUG microsandbox_network::engine::tls::proxy: TCP egress denied by strict hostname policy "
             "dst=203.0.113.9:443"),
    ])
    assert [(r.destination, r.protocol, r.port, r.reason) for r in refusals_of_log(log)] == [
        ("other.example.com", "tcp", 443, ""),
        ("plain.example.com", "tcp", 8080, ""),
        ("203.0.113.9", "tcp", 443, "its host name could not be read to be checked"),
    ]


def test_a_placeholder_sent_elsewhere_is_listed_with_its_reason() -> None:
    log = line("DEBUG microsandbox_network::engine::tcp::proxy: TCP proxy task ended dst=1.2.3.4:8080 "
               "error=secret violation: request blocked by secret policy")
    (refusal,) = refusals_of_log(log)
    assert (refusal.destination, refusal.protocol, refusal.port) == ("1.2.3.4", "tcp", 8080)
    assert "placeholder" in refusal.reason


def test_lines_of_other_parts_of_msb_and_lines_without_a_destination_are_left_out() -> None:
    log = "\n".join([
        *NOISE,
        line("DEBUG msb_krun_devices::virtio::net: DNS query denied by network policy domain=not-the-network.org"),
        line("DEBUG microsandbox_network::engine::dns::forwarder: DNS query denied by network policy"),
    ])
    assert refusals_of_log(log) == []
