"""A network policy as `msb create` arguments, and the bundled msb accepting every one of them."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

import pytest
import trustme

from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from opencode_sandbox.runtime.microsandbox.network import msb_network_args, upstream_trust_args

RULES = EgressPolicy(
    Profile.PUBLIC,
    allow=(parse_rule("10.0.0.5:5432"), parse_rule("*.corp.example"), parse_rule("[fd00::/8]:443")),
    deny=(parse_rule("paste.example.com"), parse_rule("[2001:db8::1]")),
)
SECRETS = parse_secrets({
    "OPENAI_API_KEY": ["api.openai.com"],
    "ANTHROPIC_API_KEY": {"hosts": ["api.anthropic.com", "*.anthropic.example"], "headers": ["x-api-key"]},
    "GATEWAY_TOKEN": {"hosts": ["api.openai.com"], "headers": ["authorization", "x-gateway-token"]},
})
SECRET_ARGS = [
    "--secret", "OPENAI_API_KEY@api.openai.com",
    "--secret", "ANTHROPIC_API_KEY:headers=[x-api-key]@api.anthropic.com,*.anthropic.example",
    "--secret", "GATEWAY_TOKEN:headers=[authorization,x-gateway-token]@api.openai.com",
]
HOST = (ipaddress.ip_address("192.0.2.2"), ipaddress.ip_address("2001:db8::2"), ipaddress.ip_address("192.0.2.1"))

CASES = {
    "public": (EgressPolicy(), [],
               ["--net-default-egress", "deny", "--log-level", "debug", "--net-rule", "allow@dns,allow@public"]),
    "public with rules and host addresses": (RULES, HOST, [
        "--net-default-egress", "deny", "--log-level", "debug", "--net-rule",
        "deny@paste.example.com,deny@[2001:db8::1],deny@192.0.2.1,deny@192.0.2.2,deny@[2001:db8::2],"
        "allow@10.0.0.5:tcp:5432,allow@*.corp.example,allow@[fd00::/8]:tcp:443,allow@dns,allow@public",
    ]),
    "allowlist": (RULES._replace(profile=Profile.ALLOWLIST), HOST, [
        "--net-default-egress", "deny", "--tls-intercept", "--log-level", "debug", "--net-rule",
        "deny@paste.example.com,deny@[2001:db8::1],allow@10.0.0.5:tcp:5432,allow@*.corp.example,"
        "allow@[fd00::/8]:tcp:443",
    ]),
    "allowlist naming nothing": (EgressPolicy(Profile.ALLOWLIST), [],
                                 ["--net-default-egress", "deny", "--tls-intercept", "--log-level", "debug"]),
    "none": (RULES._replace(profile=Profile.NONE), HOST, ["--net-default-egress", "deny", "--log-level", "debug"]),
    "all": (EgressPolicy(Profile.ALL), HOST, ["--net", "all"]),
    "public with secrets": (EgressPolicy(secrets=SECRETS), [],
                            ["--net-default-egress", "deny", "--log-level", "debug", "--net-rule",
                             "allow@dns,allow@public", *SECRET_ARGS]),
    "allowlist with secrets": (RULES._replace(profile=Profile.ALLOWLIST, secrets=SECRETS), HOST, [
        "--net-default-egress", "deny", "--tls-intercept", "--log-level", "debug", "--net-rule",
        "deny@paste.example.com,deny@[2001:db8::1],allow@10.0.0.5:tcp:5432,allow@*.corp.example,"
        "allow@[fd00::/8]:tcp:443,allow@api.openai.com:tcp:443,allow@api.anthropic.com:tcp:443,"
        "allow@*.anthropic.example:tcp:443", *SECRET_ARGS,
    ]),
    "all with a secret": (EgressPolicy(Profile.ALL, secrets=SECRETS[:1]), [],
                          ["--net", "all", "--secret", "OPENAI_API_KEY@api.openai.com"]),
    "all with a deny rule": (EgressPolicy(Profile.ALL, deny=(parse_rule("169.254.169.254"),)), [],
                             ["--net-default-egress", "allow", "--net-rule", "deny@169.254.169.254"]),
}


@pytest.mark.parametrize(("policy", "host", "expected"), CASES.values(), ids=CASES.keys())
def test_each_profile_as_msb_arguments(policy: EgressPolicy, host: tuple[ipaddress.IPv4Address, ...],
                                       expected: list[str]) -> None:
    assert msb_network_args(policy, host) == expected


def test_no_profile_refuses_inbound_traffic() -> None:
    """`--net none` and `--no-net` would also cut the host off from the daemon's published port."""
    for policy, host, _ in CASES.values():
        arguments = msb_network_args(policy, host)
        assert "--no-net" not in arguments and "none" not in arguments
        assert "--net-default" not in arguments and "--net-default-ingress" not in arguments


def test_secrets_under_none_are_refused() -> None:
    with pytest.raises(ValueError, match="the network profile is none"):
        msb_network_args(EgressPolicy(Profile.NONE, secrets=SECRETS))


def _msb_create_error(arguments: list[str]) -> str:
    """What `msb create` says about `arguments` for an image it does not have: its argument
    errors come before the image lookup, so "image not cached" means every argument was taken.
    Each secret has a value in msb's environment, as the backend gives it."""
    values = {secret.name: f"value-of-{secret.name}" for secret in SECRETS}
    completed = subprocess.run(
        [str(locate_msb()), "create", "osb-absent-image:1", "--pull", "never", "--name", "osb-network-args",
         *arguments], capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **values},
    )
    assert completed.returncode != 0
    return completed.stderr


@pytest.mark.msb
@pytest.mark.parametrize(("policy", "host", "expected"), CASES.values(), ids=CASES.keys())
def test_the_bundled_msb_takes_the_arguments(policy: EgressPolicy, host: tuple[ipaddress.IPv4Address, ...],
                                              expected: list[str]) -> None:
    assert "image not cached" in _msb_create_error(msb_network_args(policy, host))


@pytest.mark.msb
def test_the_bundled_msb_refuses_a_secret_it_cannot_read() -> None:
    """msb names a malformed `--secret` before it looks for the image, as the check above relies on."""
    error = _msb_create_error(["--secret", "OPENAI_API_KEY"])
    assert "ENV[:OPTIONS]@HOST" in error and "image not cached" not in error


@pytest.mark.msb
def test_the_bundled_msb_refuses_a_rule_it_cannot_read() -> None:
    """The check above can fail: msb names a malformed rule before it looks for the image."""
    error = _msb_create_error(["--net-default-egress", "deny", "--net-rule", "deny@fd00::/8"])
    assert "ambiguous" in error and "image not cached" not in error


def test_extra_certificates_verify_intercepted_servers_only() -> None:
    files = ["/etc/corp/ca.pem", "/home/me/extra.pem", "/etc/corp/ca.pem"]
    named = ["--tls-upstream-ca-cert", "/etc/corp/ca.pem", "--tls-upstream-ca-cert", "/home/me/extra.pem"]
    assert upstream_trust_args(EgressPolicy(Profile.ALLOWLIST), files) == named
    assert upstream_trust_args(EgressPolicy(Profile.PUBLIC, secrets=SECRETS), files) == named
    assert upstream_trust_args(EgressPolicy(Profile.PUBLIC), files) == []
    assert upstream_trust_args(EgressPolicy(Profile.ALLOWLIST), []) == []


@pytest.mark.msb
def test_the_bundled_msb_takes_an_extra_certificate_file(tmp_path: Path) -> None:
    certificate = tmp_path / "corporate.pem"
    certificate.write_bytes(trustme.CA().cert_pem.bytes())
    arguments = [*msb_network_args(EgressPolicy(Profile.ALLOWLIST, (parse_rule("api.example.com"),))),
                 *upstream_trust_args(EgressPolicy(Profile.ALLOWLIST), [str(certificate)])]
    assert "image not cached" in _msb_create_error(arguments)
