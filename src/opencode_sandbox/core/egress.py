"""Where the VM may connect: the network profiles, the `egress-allow` / `egress-deny` rules, and
the decision for one destination. Pure: the runtimes turn a policy into their own rules.

A rule is a host name (`example.com`), every name below a domain (`*.example.com`), or an address
range (`10.0.0.0/8`, `[fd00::/8]`), each with an optional port (`example.com:443`,
`[fd00::/8]:443`). Deny rules win over everything; allow rules open destinations on top of any
profile but `none`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from enum import StrEnum

from opencode_sandbox.core.records import Record

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Profile(StrEnum):
    PUBLIC = "public"
    """The internet, but no private range and not the host."""
    ALLOWLIST = "allowlist"
    """Only what `egress-allow` (and the hosts of configured secrets) name."""
    NONE = "none"
    """No network at all."""
    ALL = "all"
    """No restriction."""


PRIVATE_RANGES: tuple[IpNetwork, ...] = tuple(ipaddress.ip_network(text) for text in (
    "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the host's own services
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # RFC 1918
    "100.64.0.0/10",  # carrier-grade NAT
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, with the cloud metadata endpoint 169.254.169.254
    "::/128", "::1/128",  # unspecified, loopback
    "fc00::/7",  # unique-local
    "fe80::/10",  # link-local
    "::ffff:0:0/96",  # IPv4-mapped: judged as the IPv4 address it maps instead
))
"""What `public` keeps out of reach, besides the host's own addresses."""

GROUP_RANGES: tuple[IpNetwork, ...] = tuple(ipaddress.ip_network(text) for text in (
    "224.0.0.0/4",  # multicast
    "255.255.255.255/32",  # broadcast on the local network
    "ff00::/8",  # IPv6 multicast
))
"""Destinations that reach every machine of a group on the local network, the host among them:
out of reach under every profile but `all`, whatever the allow rules."""


def private_range_of(address: IpAddress) -> IpNetwork | None:
    """The range of `PRIVATE_RANGES` that holds `address`, if any."""
    return next((network for network in PRIVATE_RANGES
                 if address.version == network.version and address in network), None)

HTTPS_PORT = 443

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOST = rf"^{_LABEL}(?:\.{_LABEL})*$"


class EgressRule(Record):
    """One destination: a host name, a domain's names, or an address range; any port or one."""

    text: str
    """As written, for messages."""
    host: str = ""
    """A host name, lower case; with `subdomains`, the domain whose names it covers."""
    subdomains: bool = False
    network: IpNetwork | None = None
    port: int | None = None

    def matches(self, host: str, address: IpAddress | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address.version == self.network.version and address in self.network
        name = host.lower().rstrip(".")
        if self.subdomains:
            return name.endswith("." + self.host)
        return name == self.host


def parse_rule(text: str) -> EgressRule:
    """A rule as written in `egress-allow` / `egress-deny`; ValueError says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("an empty rule; write a host, *.domain or an address range, with an optional :port")
    written = text.strip()
    target, port = _split_port(written)
    if target.startswith("["):
        return EgressRule(written, network=_network(written, target[1:-1]), port=port)
    if _looks_like_address(target):
        return EgressRule(written, network=_network(written, target), port=port)
    subdomains = target.startswith("*.")
    name = (target[2:] if subdomains else target).lower().rstrip(".")
    if "*" in name:
        raise ValueError(f"'{written}': a wildcard is only allowed as the first label, as in *.example.com")
    if not re.match(_HOST, name):
        raise ValueError(f"'{written}' is not a host name, *.domain or address range")
    if "." not in name:
        raise ValueError(f"'{written}' names a whole top-level domain; name a domain below it, as in *.example.com")
    return EgressRule(written, host=name, subdomains=subdomains, port=port)


def _split_port(written: str) -> tuple[str, int | None]:
    """The target and the port after its last ':'; an IPv6 range is written in brackets."""
    if written.startswith("["):
        target, bracket, rest = written.partition("]")
        if not bracket:
            raise ValueError(f"'{written}': an IPv6 range in brackets is missing its ']'")
        if rest and not rest.startswith(":"):
            raise ValueError(f"'{written}': only ':port' may follow the ']'")
        return target + bracket, _port(written, rest[1:]) if rest else None
    if written.count(":") > 1:
        raise ValueError(f"'{written}': write an IPv6 range in brackets, as in [fd00::/8] or [fd00::/8]:443")
    target, colon, port_text = written.partition(":")
    return target, _port(written, port_text) if colon else None


def _port(written: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"'{written}': the port after ':' must be a number from 1 to 65535")
    return int(text)


def _looks_like_address(target: str) -> bool:
    return bool(re.match(r"^[0-9.]+(/[0-9]+)?$", target))


def _network(written: str, target: str) -> IpNetwork:
    try:
        return ipaddress.ip_network(target, strict=False)
    except ValueError:
        raise ValueError(f"'{written}' is not an address or address range (CIDR), as in 10.0.0.0/8") from None


def parse_profile(value: object) -> Profile:
    choices = ", ".join(profile.value for profile in Profile)
    if not isinstance(value, str) or value not in {profile.value for profile in Profile}:
        raise ValueError(f"'{value}' is not a network profile; choose one of: {choices}")
    return Profile(value)


class SecretRule(Record):
    """One secret: the variable's name and where its value may be sent."""

    name: str
    hosts: tuple[EgressRule, ...]
    """Host names or `*.domain`s, never addresses or ports: the value goes only to a server that
    proves, over TLS, that it is one of them."""
    headers: tuple[str, ...] = ()
    """The request header fields (lower case) the value may be put in; empty: any header."""

    @property
    def host_texts(self) -> list[str]:
        return [rule.text for rule in self.hosts]

    def describe(self) -> str:
        headers = f" (headers {', '.join(self.headers)})" if self.headers else ""
        return f"{self.name} -> {', '.join(self.host_texts)}{headers}"

    def fingerprint_value(self) -> dict[str, object]:
        return {"hosts": sorted(self.host_texts), "headers": sorted(self.headers)}


class Verdict(Record):
    allowed: bool
    reason: str


class EgressPolicy(Record):
    profile: Profile = Profile.PUBLIC
    allow: tuple[EgressRule, ...] = ()
    deny: tuple[EgressRule, ...] = ()
    secrets: tuple[SecretRule, ...] = ()
    """Under `allowlist`, their hosts are allowed on the HTTPS port too."""

    def refusal(self) -> str | None:
        """Why this policy cannot be run on any runtime, or None."""
        if self.secrets and self.profile is Profile.NONE:
            return (f"secrets ({', '.join(secret.name for secret in self.secrets)}) are set but the network "
                    "profile is none: the VM could send them nowhere")
        return None

    def describe(self) -> str:
        """One line for `doctor` and `run --dry-run`: the profile and the rules on top of it."""
        parts = [self.profile.value]
        if self.allow:
            parts.append("egress-allow " + ", ".join(rule.text for rule in self.allow))
        if self.deny:
            parts.append("egress-deny " + ", ".join(rule.text for rule in self.deny))
        return "; ".join(parts)

    def fingerprint_value(self) -> dict[str, object]:
        """What a VM's fingerprint holds of the policy: rule order never matters (deny wins)."""
        value: dict[str, object] = {"profile": self.profile.value, "allow": sorted(rule.text for rule in self.allow),
                                    "deny": sorted(rule.text for rule in self.deny)}
        if self.secrets:  # never their values: those are not the VM's to know
            value["secrets"] = {secret.name: secret.fingerprint_value() for secret in self.secrets}
        return value

    def judge(self, host: str, address: IpAddress | None, port: int,
              host_addresses: frozenset[IpAddress] = frozenset()) -> Verdict:
        """Whether the VM may connect to `host` (resolved to `address`, when known) on `port`.
        `host_addresses` are the host machine's own addresses, out of reach under `public`."""
        if address is not None and isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        if self.profile is Profile.NONE:
            return Verdict(False, "the network profile is none")
        for rule in self.deny:
            if rule.matches(host, address, port):
                return Verdict(False, f"egress-deny {rule.text}")
        for rule in self.allow:
            if rule.matches(host, address, port):
                return Verdict(True, f"egress-allow {rule.text}")
        if self.profile is Profile.ALL:
            return Verdict(True, "the network profile is all")
        if self.profile is Profile.ALLOWLIST:
            for secret in self.secrets:
                if port == HTTPS_PORT and any(rule.matches(host, None, port) for rule in secret.hosts):
                    return Verdict(True, f"a host of the secret {secret.name} (the network profile is allowlist)")
            return Verdict(False, "not in egress-allow (the network profile is allowlist)")
        if address is None:
            return Verdict(True, "a public name; its address is judged when it is known")
        if address in host_addresses:
            return Verdict(False, "the host itself (the network profile is public)")
        network = private_range_of(address)
        if network is not None:
            return Verdict(False, f"a private address, in {network} (the network profile is public)")
        return Verdict(True, "a public address")

    def judge_resolved(self, host: str, addresses: Iterable[IpAddress], port: int,
                       host_addresses: frozenset[IpAddress] = frozenset()) -> Verdict:
        """Whether a proxy may connect to `host` on `port`, now that the name resolved to
        `addresses`: the name must be allowed, and under every profile but `all` none of its
        addresses may be private or the host's own, unless an address rule allows it."""
        verdict = self.judge(host, address_of(host), port, host_addresses)
        if not verdict.allowed:
            return verdict
        for address in addresses:
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            for rule in self.deny:
                if rule.network is not None and rule.matches(host, address, port):
                    return Verdict(False, f"{host} resolves to {address}: egress-deny {rule.text}")
            if self.profile is Profile.ALL or any(
                    rule.network is not None and rule.matches(host, address, port) for rule in self.allow):
                continue
            if address in host_addresses:
                return Verdict(False, f"{host} resolves to {address}, the host itself")
            network = private_range_of(address)
            if network is not None:
                return Verdict(False, f"{host} resolves to {address}, a private address in {network}")
        return verdict

    @property
    def names_hosts(self) -> bool:
        """Whether a rule names a host (not an address range): only a proxy can judge those."""
        return any(rule.network is None for rule in (*self.allow, *self.deny))

    def document(self) -> dict[str, object]:
        """The policy as plain JSON values (secrets' names, hosts and headers, never their values),
        read back by `policy_of_document`."""
        value: dict[str, object] = {"profile": self.profile.value, "allow": [rule.text for rule in self.allow],
                                    "deny": [rule.text for rule in self.deny]}
        if self.secrets:
            value["secrets"] = {secret.name: secret.fingerprint_value() for secret in self.secrets}
        return value


def address_of(text: str) -> IpAddress | None:
    """`text` as an address when it is one (brackets around IPv6 allowed), else None."""
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
