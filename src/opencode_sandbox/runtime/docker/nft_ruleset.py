"""A network policy as the docker runtime enforces it: an nftables ruleset for the VM container's
own network namespace (pure text; `docker_netfilter` installs it).

Only the output hook is filtered: whatever the VM sends to a destination the policy refuses is
rejected at once (a TCP reset, an ICMP error for the rest), so a refused connection fails fast
instead of hanging. Each refused TCP or UDP destination is remembered for an hour with a count,
in a set `network log` reads. Replies of connections that reach the VM (the published port of `opencode
serve`) pass as established traffic. Docker's embedded DNS server (127.0.0.11, on the loopback)
answers under `public` and is refused under `none`.

What nftables cannot judge, a host name in a rule and the `allowlist` profile, goes through the
project's proxy container (`docker_proxy`): the VM's ruleset then lets it reach the proxy's port
and the address ranges its rules allow, and nothing else, Docker's DNS included (the proxy
resolves names, the VM none). The proxy's own namespace gets `proxy_side_policy`: whatever name
it is allowed to reach, a private address or the host stays out of reach. Secrets go through the
proxy too: it puts their values into requests on their way out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from opencode_sandbox.core.egress import GROUP_RANGES, PRIVATE_RANGES, EgressPolicy, EgressRule, IpAddress, Profile
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import Refusal

TABLE = "opencode_sandbox"
DOCKER_DNS = "127.0.0.11"
PROXY_PORT = 8080
UNENFORCEABLE_HINT = ("use the microsandbox runtime (`--runtime microsandbox`), which enforces every network "
                      "policy, or set `network: all` to run without restriction")
_REFUSE = {4: "refuse4", 6: "refuse6"}
_FAMILY = {4: "ip", 6: "ip6"}
REFUSED_SETS = ("refused4", "refused6")
"""The destinations refused in the last hour, with a count each, for `network log`."""
REFUSAL_MEMORY_S = 3600
_PROTOCOLS = {6: "tcp", 17: "udp"}


def docker_refusal(policy: EgressPolicy, privileged: bool = False) -> UsageError | None:
    """The error for a `policy` the docker runtime cannot enforce, or None when it can.
    `privileged`: the VM runs privileged (Docker-in-Docker), so root in it could change any rule."""
    if privileged and policy.profile is not Profile.ALL:
        return UsageError(f"a Docker-in-Docker image runs privileged: the {policy.profile.value} network profile "
                          "cannot hold it", hint=UNENFORCEABLE_HINT)
    return None


def needs_proxy(policy: EgressPolicy) -> bool:
    """Whether the VM's traffic goes through the project's proxy: under `allowlist`, with secrets
    (the proxy puts their values in), and under `public` or `all` when a deny rule names a host.
    (An allow rule naming a host changes nothing there: public names are allowed already, and a
    name that resolves to a private address stays refused under `public`.)"""
    if policy.profile is Profile.ALLOWLIST or policy.secrets:
        return True
    return policy.profile is not Profile.NONE and any(rule.network is None for rule in policy.deny)


def proxy_side_policy(policy: EgressPolicy) -> EgressPolicy:
    """What the proxy's own network namespace enforces for the VM's `policy`: the address rules,
    and no private range or host address under every profile but `all`."""
    return EgressPolicy(Profile.ALL if policy.profile is Profile.ALL else Profile.PUBLIC,
                        _addressed(policy.allow), _addressed(policy.deny))


def nft_ruleset(policy: EgressPolicy, host_addresses: Iterable[IpAddress] = (),
                resolvers: Iterable[IpAddress] = (), proxy: IpAddress | None = None,
                inbound_from: IpAddress | None = None) -> str | None:
    """The `nft -f` input that replaces this tool's table with `policy`; None when nothing is
    filtered (`all` without deny rules, nothing inbound). `host_addresses`: the host's own public
    addresses, out of reach under `public` (its private ones are in the private ranges already).
    `resolvers`: the DNS servers Docker's embedded DNS forwards the VM's lookups to, reachable on
    port 53 under `public` wherever they are. `proxy`: the proxy's address, which a policy that
    `needs_proxy` must be given (the VM then reaches no resolver: the proxy resolves names).
    `inbound_from`: the only address a new connection to the VM may come from, under every profile:
    the host's side of the project network, where the engine's published ports (on the host's
    127.0.0.1) come from. An engine that routes other machines' packets to the VM's own address
    (Docker before 28 does, for a neighbour whose route leads through the host) then reaches
    nothing in the VM."""
    refusal = docker_refusal(policy)
    if refusal is not None:
        raise refusal
    through_proxy = needs_proxy(policy)
    if through_proxy and proxy is None:
        raise ValueError("a policy that needs the proxy needs its address")
    if policy.profile is Profile.ALL and not policy.deny and not through_proxy and inbound_from is None:
        return None
    allow, deny = _addressed(policy.allow), _addressed(policy.deny)
    no_dns = policy.profile is Profile.NONE or through_proxy
    output = [f"oifname \"lo\" ip daddr {DOCKER_DNS} goto refuse4"] if no_dns else []
    output += ['oifname "lo" accept']
    if policy.profile is not Profile.ALL:
        output += ["ip daddr @group4 goto refuse4", "ip6 daddr @group6 goto refuse6"]
    # Only the VM's own flows, which these rules let out when they began, and its answers on TCP
    # connections made to it (its published ports) pass unjudged: a datagram a host service sent
    # it must not open a way back to that service.
    output += ["ct direction original ct state established,related accept",
               "ct direction reply meta l4proto tcp ct state established,related accept"]
    output += [_rule_line(rule, "goto " + _REFUSE[_version(rule)]) for rule in deny]
    if policy.profile is Profile.NONE:
        output += ["meta nfproto ipv4 goto refuse4", "meta nfproto ipv6 goto refuse6"]
    else:
        output += [_rule_line(rule, "accept") for rule in allow]
    if through_proxy:
        assert proxy is not None
        output += [f"{_FAMILY[proxy.version]} daddr {proxy} tcp dport {PROXY_PORT} accept",
                   "meta nfproto ipv4 goto refuse4", "meta nfproto ipv6 goto refuse6"]
    elif policy.profile is Profile.PUBLIC:
        output += [f"{_FAMILY[server.version]} daddr {server} meta l4proto {{ tcp, udp }} th dport 53 accept"
                   for server in sorted(set(resolvers), key=lambda address: (address.version, int(address)))]
        output += ["ip daddr @host4 goto refuse4", "ip6 daddr @host6 goto refuse6",
                   "ip daddr @private4 goto refuse4", "ip6 daddr @private6 goto refuse6"]
    hosts = sorted(set(host_addresses), key=lambda address: (address.version, int(address)))
    lines = [
        f"table inet {TABLE} {{}}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        _set("private4", "ipv4_addr", [str(net) for net in PRIVATE_RANGES if net.version == 4]),
        _set("private6", "ipv6_addr", [str(net) for net in PRIVATE_RANGES if net.version == 6]),
        _set("host4", "ipv4_addr", [str(address) for address in hosts if address.version == 4]),
        _set("group4", "ipv4_addr", [str(net) for net in GROUP_RANGES if net.version == 4]),
        _set("group6", "ipv6_addr", [str(net) for net in GROUP_RANGES if net.version == 6]),
        _set("host6", "ipv6_addr", [str(address) for address in hosts if address.version == 6]),
        *(_refused_set(version) for version in (4, 6)),
        "  chain output {",
        "    type filter hook output priority 0; policy accept;",
        *(f"    {line}" for line in output),
        "  }",
        *_input_chain(inbound_from),
        *_refuse_chain(4),
        *_refuse_chain(6),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _input_chain(inbound_from: IpAddress | None) -> list[str]:
    if inbound_from is None:
        return []
    return [
        "  chain input {",
        "    type filter hook input priority 0; policy accept;",
        '    iifname "lo" accept',
        "    ct state established,related accept",
        f"    {_FAMILY[inbound_from.version]} saddr {inbound_from} accept",
        "    meta l4proto tcp reject with tcp reset",
        "    drop",
        "  }",
    ]


def _addressed(rules: tuple[EgressRule, ...]) -> tuple[EgressRule, ...]:
    """The rules nftables judges: address ranges (a host name is the proxy's to judge)."""
    return tuple(rule for rule in rules if rule.network is not None)


def _set(name: str, kind: str, elements: list[str]) -> str:
    body = f" elements = {{ {', '.join(elements)} }};" if elements else ""
    return f"  set {name} {{ type {kind}; flags interval;{body} }}"


def _refused_set(version: int) -> str:
    address = "ipv4_addr" if version == 4 else "ipv6_addr"
    return (f"  set {REFUSED_SETS[version == 6]} {{ type {address} . inet_proto . inet_service; "
            f"flags dynamic, timeout; timeout {REFUSAL_MEMORY_S}s; size 4096; counter; }}")


def _refuse_chain(version: int) -> list[str]:
    return [
        f"  chain {_REFUSE[version]} {{",
        f"    meta l4proto {{ tcp, udp }} update @{REFUSED_SETS[version == 6]} "
        f"{{ {_FAMILY[version]} daddr . meta l4proto . th dport }}",
        "    meta l4proto tcp reject with tcp reset",
        "    reject with icmpx admin-prohibited",
        "  }",
    ]


def refusals_of_listing(listing: str, now: datetime) -> list[Refusal]:
    """The refusals in `nft -j list table` output of this tool's table: each refused set's element
    had its timeout reset by its latest refusal, which so happened `timeout - expires` seconds ago."""
    refusals = []
    for entry in json.loads(listing).get("nftables", []):
        found = entry.get("set")
        if not found or found.get("name") not in REFUSED_SETS:
            continue
        timeout = int(found.get("timeout", REFUSAL_MEMORY_S))
        for element in found.get("elem", []):
            element = element.get("elem", element)
            address, protocol, port = element["val"]["concat"]
            ago = timeout - int(element.get("expires", timeout))
            refusals.append(Refusal(str(address), _PROTOCOLS.get(int(protocol), str(protocol)), int(port),
                                    int(element.get("counter", {}).get("packets", 1)),
                                    now - timedelta(seconds=ago)))
    return refusals


def _version(rule: EgressRule) -> int:
    assert rule.network is not None  # only address rules reach nftables
    return rule.network.version


def _rule_line(rule: EgressRule, verdict: str) -> str:
    assert rule.network is not None
    port = f" meta l4proto {{ tcp, udp }} th dport {rule.port}" if rule.port is not None else ""
    return f"{_FAMILY[rule.network.version]} daddr {rule.network}{port} {verdict}"
