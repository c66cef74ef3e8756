"""A network policy as msb's own policy engine takes it: `msb create` arguments.

msb enforces everything itself (egress rules, DNS answers, interception); nothing here filters.
Rules are evaluated in order, first match wins, so deny rules come first. Two msb defaults are
avoided on purpose: `--net none` and `--no-net` also refuse inbound traffic, which would cut the
host off from `opencode serve`'s published port, so `none` is a denying egress default alone; and
the `dns` rule lets every name resolve, so `allowlist` leaves it out (only allowed names then
resolve). An `allowlist` hostname rule needs the request's authority, so HTTPS is intercepted.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from opencode_sandbox.core.egress import EgressPolicy, EgressRule, IpAddress, Profile


def msb_network_args(policy: EgressPolicy, host_public_addresses: Iterable[IpAddress] = ()) -> list[str]:
    """The `msb create` arguments for `policy`. Under `public`, `host_public_addresses` (the host's
    own addresses outside the private ranges msb's `public` group already leaves out) are denied."""
    deny = [_msb_rule("deny", rule) for rule in policy.deny]
    allow = [_msb_rule("allow", rule) for rule in policy.allow]
    if policy.profile is Profile.NONE:
        return ["--net-default-egress", "deny", "--log-level", "debug"]
    if policy.profile is Profile.ALL:
        rules = [*deny, *allow]
        return ["--net", "all"] if not rules else ["--net-default-egress", "allow", "--net-rule", ",".join(rules)]
    if policy.profile is Profile.ALLOWLIST:
        arguments = ["--net-default-egress", "deny", "--tls-intercept", "--log-level", "debug"]
        rules = [*deny, *allow]
        return [*arguments, "--net-rule", ",".join(rules)] if rules else arguments
    host = [f"deny@{_address_target(address)}" for address in sorted(set(host_public_addresses), key=_order)]
    return ["--net-default-egress", "deny", "--net-rule", ",".join([*deny, *host, *allow, "allow@dns", "allow@public"])]


def _msb_rule(action: str, rule: EgressRule) -> str:
    if rule.network is not None:
        target = _network_target(rule.network)
    else:
        target = f"*.{rule.host}" if rule.subdomains else rule.host
    return f"{action}@{target}" + (f":tcp:{rule.port}" if rule.port is not None else "")


def _network_target(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str:
    if network.num_addresses == 1:
        return _address_target(network.network_address)
    return f"[{network}]" if network.version == 6 else str(network)


def _address_target(address: IpAddress) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _order(address: IpAddress) -> tuple[int, int]:
    return address.version, int(address)
