"""A network policy as msb's own policy engine takes it: `msb create` arguments.

msb enforces everything itself (egress rules, DNS answers, interception); nothing here filters.
Rules are evaluated in order, first match wins, so deny rules come first. Two msb defaults are
avoided on purpose: `--net none` and `--no-net` also refuse inbound traffic, which would cut the
host off from `opencode serve`'s published port, so `none` is a denying egress default alone; and
the `dns` rule lets every name resolve, so `allowlist` leaves it out (only allowed names then
resolve). An `allowlist` hostname rule needs the request's authority, so HTTPS is intercepted.

A secret is a `--secret NAME[:headers=[...]]@host,...`: the guest's NAME holds the placeholder
`$MSB_NAME`, and msb puts the real value in its place only in requests to those hosts (intercepting
their HTTPS). msb reads the value from its own environment at create and at every start; msb
itself adds no rule for the hosts, so `allowlist` allows each on the HTTPS port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from opencode_sandbox.core.egress import HTTPS_PORT, EgressPolicy, EgressRule, IpAddress, Profile, SecretRule


def msb_network_args(policy: EgressPolicy, host_public_addresses: Iterable[IpAddress] = ()) -> list[str]:
    """The `msb create` arguments for `policy`. Under `public`, `host_public_addresses` (the host's
    own addresses outside the private ranges msb's `public` group already leaves out) are denied."""
    refusal = policy.refusal()
    if refusal is not None:
        raise ValueError(refusal)
    return [*_policy_args(policy, host_public_addresses), *secret_args(policy.secrets)]


def intercepts(policy: EgressPolicy) -> bool:
    """Whether msb intercepts the VM's HTTPS: for an allowlist's host names, and for secrets."""
    return policy.profile is Profile.ALLOWLIST or bool(policy.secrets)


def upstream_trust_args(policy: EgressPolicy, ca_files: Iterable[str]) -> list[str]:
    """Under interception msb, not the VM, verifies the servers: with the host's own store, and
    with the extra CA files named here (a company's TLS inspection, a private registry)."""
    if not intercepts(policy):
        return []
    return [argument for path in dict.fromkeys(ca_files) for argument in ("--tls-upstream-ca-cert", path)]


def secret_args(secrets: Iterable[SecretRule]) -> list[str]:
    """One `--secret` per secret: its name, the header fields it may be put in, its hosts."""
    arguments: list[str] = []
    for secret in secrets:
        options = f":headers=[{','.join(secret.headers)}]" if secret.headers else ""
        arguments += ["--secret", f"{secret.name}{options}@{','.join(_host_target(rule) for rule in secret.hosts)}"]
    return arguments


def _policy_args(policy: EgressPolicy, host_public_addresses: Iterable[IpAddress]) -> list[str]:
    deny = [_msb_rule("deny", rule) for rule in policy.deny]
    allow = [_msb_rule("allow", rule) for rule in policy.allow]
    if policy.profile is Profile.NONE:
        return ["--net-default-egress", "deny", "--log-level", "debug"]
    if policy.profile is Profile.ALL:
        rules = [*deny, *allow]
        return ["--net", "all"] if not rules else ["--net-default-egress", "allow", "--net-rule", ",".join(rules)]
    if policy.profile is Profile.ALLOWLIST:
        arguments = ["--net-default-egress", "deny", "--tls-intercept", "--log-level", "debug"]
        secret_hosts = dict.fromkeys(f"allow@{_host_target(rule)}:tcp:{HTTPS_PORT}"
                                     for secret in policy.secrets for rule in secret.hosts)
        rules = [*deny, *allow, *secret_hosts]
        return [*arguments, "--net-rule", ",".join(rules)] if rules else arguments
    host = [f"deny@{_address_target(address)}" for address in sorted(set(host_public_addresses), key=_order)]
    return ["--net-default-egress", "deny", "--log-level", "debug",
            "--net-rule", ",".join([*deny, *host, *allow, "allow@dns", "allow@public"])]


def _host_target(rule: EgressRule) -> str:
    return f"*.{rule.host}" if rule.subdomains else rule.host


def _msb_rule(action: str, rule: EgressRule) -> str:
    target = _network_target(rule.network) if rule.network is not None else _host_target(rule)
    return f"{action}@{target}" + (f":tcp:{rule.port}" if rule.port is not None else "")


def _network_target(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str:
    if network.num_addresses == 1:
        return _address_target(network.network_address)
    return f"[{network}]" if network.version == 6 else str(network)


def _address_target(address: IpAddress) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _order(address: IpAddress) -> tuple[int, int]:
    return address.version, int(address)
