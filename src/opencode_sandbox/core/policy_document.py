"""The network policy as a document: what the docker runtime hands its egress proxy and its firewall,
and reads back."""

from __future__ import annotations

from collections.abc import Mapping

from opencode_sandbox.core.egress import EgressPolicy, parse_profile, parse_rule
from opencode_sandbox.core.secrets import parse_secret


def policy_of_document(document: Mapping[str, object]) -> EgressPolicy:
    """The policy `EgressPolicy.document` wrote; ValueError when it is not one."""
    allow, deny = document.get("allow", []), document.get("deny", [])
    if not isinstance(allow, list) or not isinstance(deny, list):
        raise ValueError("a policy document's allow and deny are lists of rules")
    secrets = document.get("secrets", {})
    if not isinstance(secrets, Mapping):
        raise ValueError("a policy document's secrets map names to their hosts and headers")
    return EgressPolicy(parse_profile(document.get("profile")), tuple(parse_rule(rule) for rule in allow),
                        tuple(parse_rule(rule) for rule in deny),
                        tuple(parse_secret(name, _without_empty_headers(value)) for name, value in secrets.items()))


def _without_empty_headers(value: object) -> object:
    """A secret as `SecretRule.fingerprint_value` wrote it (an empty header list: any header)."""
    if isinstance(value, Mapping) and not value.get("headers"):
        return {key: item for key, item in value.items() if key != "headers"}
    return value
