"""The network policy's rules and decisions, as the runtimes are given them."""

from __future__ import annotations

import ipaddress
import re

import pytest

from opencode_sandbox.core.egress import (
    EgressPolicy,
    EgressRule,
    Profile,
    address_of,
    parse_profile,
    parse_rule,
)
from opencode_sandbox.core.policy_document import policy_of_document

V4 = ipaddress.IPv4Network
V6 = ipaddress.IPv6Network


@pytest.mark.parametrize(("text", "expected"), [
    ("example.com", EgressRule("example.com", host="example.com")),
    ("API.OpenAI.com.", EgressRule("API.OpenAI.com.", host="api.openai.com")),
    ("example.com:443", EgressRule("example.com:443", host="example.com", port=443)),
    ("*.example.com", EgressRule("*.example.com", host="example.com", subdomains=True)),
    ("*.example.com:8443", EgressRule("*.example.com:8443", host="example.com", subdomains=True, port=8443)),
    ("10.0.0.0/8", EgressRule("10.0.0.0/8", network=V4("10.0.0.0/8"))),
    ("192.168.1.7", EgressRule("192.168.1.7", network=V4("192.168.1.7/32"))),
    ("10.1.2.3/8:5432", EgressRule("10.1.2.3/8:5432", network=V4("10.0.0.0/8"), port=5432)),
    ("[fd00::/8]", EgressRule("[fd00::/8]", network=V6("fd00::/8"))),
    ("[2001:db8::1]:443", EgressRule("[2001:db8::1]:443", network=V6("2001:db8::1/128"), port=443)),
    ("  example.com  ", EgressRule("example.com", host="example.com")),
])
def test_rules_as_written(text: str, expected: EgressRule) -> None:
    assert parse_rule(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "an empty rule"),
    ("   ", "an empty rule"),
    ("com", "names a whole top-level domain"),
    ("*.com", "names a whole top-level domain"),
    ("*", "a wildcard is only allowed as the first label"),
    ("api.*.example.com", "a wildcard is only allowed as the first label"),
    ("exa mple.com", "is not a host name"),
    ("-bad.example.com", "is not a host name"),
    ("10.0.0.0/33", "is not an address or address range"),
    ("300.1.1.1", "is not an address or address range"),
    ("example.com:http", "the port after ':' must be a number"),
    ("example.com:0", "the port after ':' must be a number from 1 to 65535"),
    ("example.com:70000", "from 1 to 65535"),
    ("example.com:", "the port after ':' must be a number"),
    ("fd00::/8", "write an IPv6 range in brackets"),
    ("[fd00::/8", "missing its ']'"),
    ("[fd00::/8]x", "only ':port' may follow"),
    ("[nonsense]", "is not an address or address range"),
])
def test_malformed_rules_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_rule(text)


def test_profiles() -> None:
    assert [parse_profile(name) for name in ("public", "allowlist", "none", "all")] == list(Profile)
    with pytest.raises(ValueError, match="'open' is not a network profile; choose one of: public, allowlist, none"):
        parse_profile("open")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


HOST_ADDRESSES = frozenset({_ip("203.0.113.9")})


@pytest.mark.parametrize(("address", "allowed", "reason"), [
    ("93.184.216.34", True, "a public address"),
    ("2606:4700::1111", True, "a public address"),
    ("10.1.2.3", False, "in 10.0.0.0/8"),
    ("172.20.0.1", False, "in 172.16.0.0/12"),
    ("192.168.0.1", False, "in 192.168.0.0/16"),
    ("100.100.1.1", False, "in 100.64.0.0/10"),
    ("169.254.169.254", False, "in 169.254.0.0/16"),
    ("127.0.0.1", False, "in 127.0.0.0/8"),
    ("0.0.0.0", False, "in 0.0.0.0/8"),
    ("::1", False, "in ::1/128"),
    ("fd12::1", False, "in fc00::/7"),
    ("fe80::1", False, "in fe80::/10"),
    ("::ffff:10.0.0.1", False, "in 10.0.0.0/8"),
    ("::ffff:93.184.216.34", True, "a public address"),
    ("203.0.113.9", False, "the host itself"),
])
def test_public_keeps_private_ranges_and_the_host_out_of_reach(address: str, allowed: bool, reason: str) -> None:
    verdict = EgressPolicy(Profile.PUBLIC).judge("name.example", _ip(address), 443, HOST_ADDRESSES)
    assert verdict.allowed is allowed
    assert reason in verdict.reason


def test_allow_opens_on_top_of_a_profile_and_deny_wins() -> None:
    policy = EgressPolicy(
        Profile.PUBLIC,
        allow=(parse_rule("10.0.0.5:5432"), parse_rule("*.corp.example")),
        deny=(parse_rule("*.pastebin.com"), parse_rule("db.corp.example")),
    )
    assert policy.judge("db", _ip("10.0.0.5"), 5432).allowed
    assert not policy.judge("db", _ip("10.0.0.5"), 22).allowed, "the allow rule names one port"
    assert policy.judge("wiki.corp.example", _ip("10.9.9.9"), 443).reason == "egress-allow *.corp.example"
    assert policy.judge("db.corp.example", _ip("10.9.9.9"), 443).reason == "egress-deny db.corp.example"
    assert not policy.judge("corp.example", _ip("10.9.9.9"), 443).allowed, "*.domain covers names below it only"
    assert policy.judge("x.pastebin.com", _ip("93.184.216.34"), 443).reason == "egress-deny *.pastebin.com"


def test_allowlist_refuses_what_it_does_not_name() -> None:
    policy = EgressPolicy(Profile.ALLOWLIST, allow=(parse_rule("api.openai.com:443"),))
    assert policy.judge("api.openai.com", _ip("93.184.216.34"), 443).allowed
    assert not policy.judge("api.openai.com", _ip("93.184.216.34"), 80).allowed
    assert policy.judge("example.com", _ip("93.184.216.34"), 443).reason == \
        "not in egress-allow (the network profile is allowlist)"


def test_none_refuses_everything_and_all_only_what_is_denied() -> None:
    allow_everything = (parse_rule("example.com"),)
    assert not EgressPolicy(Profile.NONE, allow=allow_everything).judge("example.com", None, 443).allowed
    everything = EgressPolicy(Profile.ALL, deny=(parse_rule("169.254.169.254"),))
    assert everything.judge("lan", _ip("192.168.0.1"), 22).allowed
    assert not everything.judge("metadata", _ip("169.254.169.254"), 80).allowed


def test_a_name_not_yet_resolved_is_judged_by_name_only() -> None:
    policy = EgressPolicy(Profile.PUBLIC, deny=(parse_rule("10.0.0.0/8"),))
    assert policy.judge("example.com", None, 443).allowed
    assert not EgressPolicy(Profile.ALLOWLIST).judge("example.com", None, 443).allowed


def test_a_resolved_name_is_refused_when_an_address_is_private_under_every_profile_but_all() -> None:
    allowed_name = (parse_rule("api.example.com"),)
    for profile in (Profile.PUBLIC, Profile.ALLOWLIST):
        policy = EgressPolicy(profile, allowed_name)
        assert policy.judge_resolved("api.example.com", [_ip("93.184.216.34")], 443).allowed
        refused = policy.judge_resolved("api.example.com", [_ip("93.184.216.34"), _ip("10.1.2.3")], 443)
        assert not refused.allowed
        assert refused.reason == "api.example.com resolves to 10.1.2.3, a private address in 10.0.0.0/8"
        mapped = policy.judge_resolved("api.example.com", [_ip("::ffff:169.254.169.254")], 80)
        assert not mapped.allowed and "169.254.0.0/16" in mapped.reason
        host = policy.judge_resolved("api.example.com", [_ip("198.51.100.7")], 443, frozenset({_ip("198.51.100.7")}))
        assert host.reason == "api.example.com resolves to 198.51.100.7, the host itself"
    assert EgressPolicy(Profile.ALL).judge_resolved("lan.example", [_ip("192.168.1.1")], 22).allowed


def test_a_resolved_name_passes_the_address_rules_too() -> None:
    policy = EgressPolicy(Profile.ALLOWLIST, (parse_rule("*.corp.example"), parse_rule("10.9.0.0/16")),
                          (parse_rule("10.9.9.0/24"),))
    assert policy.judge_resolved("wiki.corp.example", [_ip("10.9.1.1")], 443).allowed
    refused = policy.judge_resolved("db.corp.example", [_ip("10.9.9.9")], 443)
    assert refused.reason == "db.corp.example resolves to 10.9.9.9: egress-deny 10.9.9.0/24"
    named_out = policy.judge_resolved("example.com", [_ip("10.9.1.1")], 443)
    assert named_out.reason == "not in egress-allow (the network profile is allowlist)"
    assert EgressPolicy(Profile.ALLOWLIST, (parse_rule("192.0.2.0/24"),)).judge_resolved(
        "192.0.2.5", [], 8080).allowed, "an address literal is judged as the address it is"


def test_a_policy_reads_back_from_its_document() -> None:
    policy = EgressPolicy(Profile.ALLOWLIST, (parse_rule("api.example.com:443"), parse_rule("[fd00::/8]")),
                          (parse_rule("*.evil.example"),))
    assert policy_of_document(policy.document()) == policy
    assert policy.names_hosts and not EgressPolicy(Profile.PUBLIC, (parse_rule("10.0.0.0/8"),)).names_hosts
    with pytest.raises(ValueError):
        policy_of_document({"profile": "wide"})
    with pytest.raises(ValueError):
        policy_of_document({"profile": "public", "allow": "example.com"})
    assert address_of("[2001:db8::1]") == _ip("2001:db8::1") and address_of("example.com") is None
