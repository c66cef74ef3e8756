"""The docker runtime's ruleset text for each policy, and what it refuses to render."""

from __future__ import annotations

import ipaddress
import json
from datetime import UTC, datetime, timedelta

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.runtime.docker.nft_ruleset import (
    docker_refusal,
    needs_proxy,
    nft_ruleset,
    proxy_side_policy,
    refusals_of_listing,
)
from opencode_sandbox.runtime.types import Refusal

GROUPS = ["ip daddr @group4 goto refuse4", "ip6 daddr @group6 goto refuse6"]
"""Broadcast and multicast, refused under every profile but `all`, before any allow rule."""
ESTABLISHED = ["ct direction original ct state established,related accept",
               "ct direction reply meta l4proto tcp ct state established,related accept"]


def output_chain(ruleset: str) -> list[str]:
    lines = ruleset.splitlines()
    start = lines.index("  chain output {") + 2
    return [line.strip() for line in lines[start:lines.index("  }", start)]]


def test_public_refuses_private_ranges_and_the_host_after_established_and_loopback() -> None:
    ruleset = nft_ruleset(EgressPolicy(Profile.PUBLIC), [ipaddress.ip_address("198.51.100.7")])
    assert ruleset is not None
    assert ruleset.startswith("table inet opencode_sandbox {}\ndelete table inet opencode_sandbox\n")
    assert output_chain(ruleset) == [
        'oifname "lo" accept', *GROUPS, *ESTABLISHED,
        "ip daddr @host4 goto refuse4", "ip6 daddr @host6 goto refuse6",
        "ip daddr @private4 goto refuse4", "ip6 daddr @private6 goto refuse6",
    ]
    assert "set host4 { type ipv4_addr; flags interval; elements = { 198.51.100.7 }; }" in ruleset
    assert ("set private4 { type ipv4_addr; flags interval; elements = { 0.0.0.0/8, 10.0.0.0/8, 172.16.0.0/12, "
            "192.168.0.0/16, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16 }; }") in ruleset
    assert "fc00::/7" in ruleset and "fe80::/10" in ruleset
    assert "set group4 { type ipv4_addr; flags interval; elements = { 224.0.0.0/4, 255.255.255.255/32 }; }" in ruleset
    assert "set group6 { type ipv6_addr; flags interval; elements = { ff00::/8 }; }" in ruleset
    assert "meta l4proto tcp reject with tcp reset" in ruleset
    assert "reject with icmpx admin-prohibited" in ruleset


def test_rules_come_before_the_profile_and_deny_before_allow() -> None:
    policy = EgressPolicy(Profile.PUBLIC, (parse_rule("10.1.0.0/16"),), (parse_rule("[2001:db8::/32]:443"),))
    ruleset = nft_ruleset(policy)
    assert ruleset is not None
    assert output_chain(ruleset)[5:7] == [
        "ip6 daddr 2001:db8::/32 meta l4proto { tcp, udp } th dport 443 goto refuse6",
        "ip daddr 10.1.0.0/16 accept",
    ]


def test_none_refuses_dns_and_everything_but_replies_and_loopback() -> None:
    ruleset = nft_ruleset(EgressPolicy(Profile.NONE, (parse_rule("10.1.0.0/16"),)))
    assert ruleset is not None
    assert output_chain(ruleset) == [
        'oifname "lo" ip daddr 127.0.0.11 goto refuse4', 'oifname "lo" accept', *GROUPS, *ESTABLISHED,
        "meta nfproto ipv4 goto refuse4", "meta nfproto ipv6 goto refuse6",
    ]


def test_all_filters_nothing_unless_something_is_denied() -> None:
    assert nft_ruleset(EgressPolicy(Profile.ALL)) is None
    ruleset = nft_ruleset(EgressPolicy(Profile.ALL, deny=(parse_rule("192.0.2.0/24"),)))
    assert ruleset is not None
    assert output_chain(ruleset) == ['oifname "lo" accept', *ESTABLISHED, "ip daddr 192.0.2.0/24 goto refuse4"]


PROXY = ipaddress.ip_address("172.30.0.2")


@pytest.mark.parametrize("policy", [
    EgressPolicy(Profile.ALLOWLIST),
    EgressPolicy(Profile.PUBLIC, deny=(parse_rule("evil.example.com"),)),
    EgressPolicy(Profile.ALL, deny=(parse_rule("*.example.com:443"),)),
])
def test_what_nftables_cannot_judge_goes_through_the_proxy(policy: EgressPolicy) -> None:
    assert needs_proxy(policy) and docker_refusal(policy) is None
    with pytest.raises(ValueError, match="proxy"):
        nft_ruleset(policy)
    ruleset = nft_ruleset(policy, proxy=PROXY)
    assert ruleset is not None
    assert output_chain(ruleset) == [
        'oifname "lo" ip daddr 127.0.0.11 goto refuse4', 'oifname "lo" accept',
        *([] if policy.profile is Profile.ALL else GROUPS), *ESTABLISHED, "ip daddr 172.30.0.2 tcp dport 8080 accept",
        "meta nfproto ipv4 goto refuse4", "meta nfproto ipv6 goto refuse6",
    ]


def test_through_the_proxy_address_rules_still_hold_in_the_vm() -> None:
    policy = EgressPolicy(Profile.ALLOWLIST, (parse_rule("api.example.com"), parse_rule("192.0.2.0/24")),
                          (parse_rule("192.0.2.9"), parse_rule("evil.example.com")))
    ruleset = nft_ruleset(policy, proxy=PROXY)
    assert ruleset is not None
    assert output_chain(ruleset)[6:9] == [
        "ip daddr 192.0.2.9/32 goto refuse4", "ip daddr 192.0.2.0/24 accept",
        "ip daddr 172.30.0.2 tcp dport 8080 accept",
    ]


def test_the_proxy_itself_reaches_no_private_address_but_those_allowed() -> None:
    policy = EgressPolicy(Profile.ALLOWLIST, (parse_rule("api.example.com"), parse_rule("10.9.0.0/16")),
                          (parse_rule("evil.example.com"),))
    side = proxy_side_policy(policy)
    assert side == EgressPolicy(Profile.PUBLIC, (parse_rule("10.9.0.0/16"),))
    assert not needs_proxy(side)
    assert proxy_side_policy(EgressPolicy(Profile.ALL, deny=(parse_rule("evil.example.com"),))) == \
        EgressPolicy(Profile.ALL)


def test_none_needs_no_proxy_whatever_its_rules_name() -> None:
    policy = EgressPolicy(Profile.NONE, deny=(parse_rule("*.example.com:443"),))
    assert not needs_proxy(policy)
    ruleset = nft_ruleset(policy)
    assert ruleset is not None and "example.com" not in ruleset
    assert not needs_proxy(EgressPolicy(Profile.PUBLIC, (parse_rule("10.1.0.0/16"),)))


def test_a_named_allow_rule_needs_no_proxy_where_public_names_are_allowed_already() -> None:
    rules = (parse_rule("api.example.com"), parse_rule("10.1.0.0/16"))
    assert not needs_proxy(EgressPolicy(Profile.ALL, rules)) and nft_ruleset(EgressPolicy(Profile.ALL, rules)) is None
    policy = EgressPolicy(Profile.PUBLIC, rules)
    assert not needs_proxy(policy)
    ruleset = nft_ruleset(policy)
    assert ruleset is not None and "example.com" not in ruleset and "ip daddr 10.1.0.0/16 accept" in ruleset


@pytest.mark.parametrize("profile", [Profile.PUBLIC, Profile.ALL])
def test_secrets_send_the_vms_traffic_through_the_proxy_which_puts_their_values_in(profile: Profile) -> None:
    policy = EgressPolicy(profile, secrets=parse_secrets({"OPENAI_API_KEY": ["api.openai.com"]}))
    assert docker_refusal(policy) is None and needs_proxy(policy)
    with pytest.raises(ValueError, match="needs its address"):
        nft_ruleset(policy)
    ruleset = nft_ruleset(policy, proxy=ipaddress.ip_address("172.30.0.2"))
    assert ruleset is not None and "ip daddr 172.30.0.2 tcp dport 8080 accept" in ruleset
    assert 'oifname "lo" ip daddr 127.0.0.11 goto refuse4' in ruleset, "the VM resolves nothing itself"


def test_a_privileged_vm_can_only_run_unrestricted() -> None:
    for profile in (Profile.PUBLIC, Profile.NONE):
        refusal = docker_refusal(EgressPolicy(profile), privileged=True)
        assert refusal is not None and "Docker-in-Docker" in refusal.message
    assert docker_refusal(EgressPolicy(Profile.ALL), privileged=True) is None
    assert docker_refusal(EgressPolicy(Profile.PUBLIC)) is None


def test_refusals_are_counted_per_destination_and_read_back_with_their_time() -> None:
    ruleset = nft_ruleset(EgressPolicy(Profile.PUBLIC))
    assert ruleset is not None
    assert ("set refused4 { type ipv4_addr . inet_proto . inet_service; flags dynamic, timeout; timeout 3600s; "
            "size 4096; counter; }") in ruleset
    assert "meta l4proto { tcp, udp } update @refused6 { ip6 daddr . meta l4proto . th dport }" in ruleset
    # `nft -j list table` of a VM that was refused twice at 10.1.2.3:443 (last 60 s ago) and once at DNS.
    listing = json.dumps({"nftables": [
        {"metainfo": {"version": "1.1.3"}},
        {"set": {"name": "private4", "elem": ["10.0.0.0/8"]}},
        {"set": {"name": "refused4", "timeout": 3600, "elem": [
            {"elem": {"val": {"concat": ["10.1.2.3", 6, 443]}, "expires": 3540, "counter": {"packets": 2}}},
            {"elem": {"val": {"concat": ["127.0.0.11", 17, 53]}, "expires": 3599, "counter": {"packets": 1}}},
        ]}},
        {"set": {"name": "refused6", "timeout": 3600}},
    ]})
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert refusals_of_listing(listing, now) == [
        Refusal("10.1.2.3", "tcp", 443, 2, now - timedelta(seconds=60)),
        Refusal("127.0.0.11", "udp", 53, 1, now - timedelta(seconds=1)),
    ]


def test_public_keeps_the_hosts_resolvers_reachable_on_port_53_only() -> None:
    resolvers = [ipaddress.ip_address("10.255.255.53"), ipaddress.ip_address("fd00::53")]
    ruleset = nft_ruleset(EgressPolicy(Profile.PUBLIC, deny=(parse_rule("192.168.9.0/24"),)), (), resolvers)
    assert ruleset is not None
    assert output_chain(ruleset)[5:8] == [
        "ip daddr 192.168.9.0/24 goto refuse4",
        "ip daddr 10.255.255.53 meta l4proto { tcp, udp } th dport 53 accept",
        "ip6 daddr fd00::53 meta l4proto { tcp, udp } th dport 53 accept",
    ]
    none = nft_ruleset(EgressPolicy(Profile.NONE), (), resolvers)
    assert none is not None and "10.255.255.53" not in none


@pytest.mark.parametrize("policy", [EgressPolicy(profile) for profile in (Profile.PUBLIC, Profile.ALL, Profile.NONE)])
def test_new_connections_to_the_vm_come_only_from_the_hosts_side_of_its_network(policy: EgressPolicy) -> None:
    """The engine's published ports reach the VM from the network's gateway; a neighbour routed to
    the VM's own address is refused under every profile, `all` included."""
    ruleset = nft_ruleset(policy, inbound_from=ipaddress.ip_address("172.30.0.1"))
    assert ruleset is not None
    lines = [line.strip() for line in ruleset.splitlines()]
    start = lines.index("chain input {") + 1
    assert lines[start:lines.index("}", start)] == [
        "type filter hook input priority 0; policy accept;", 'iifname "lo" accept',
        "ct state established,related accept", "ip saddr 172.30.0.1 accept",
        "meta l4proto tcp reject with tcp reset", "drop",
    ]
    assert "chain input" not in (nft_ruleset(EgressPolicy(Profile.PUBLIC)) or "")
