"""Secrets as settings: names, hosts and header fields; `secrets.env` files; the policy's view."""

from __future__ import annotations

import ipaddress

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.core.secrets import parse_secrets, parse_values_file, render_values_file

SECRETS = parse_secrets({"OPENAI_API_KEY": ["api.openai.com"],
                         "CORP_TOKEN": {"hosts": ["*.corp.example"], "headers": ["Authorization"]}})


def test_the_mapping_and_the_text_form_say_the_same() -> None:
    assert parse_secrets("OPENAI_API_KEY=api.openai.com;CORP_TOKEN[authorization]=*.corp.example") == SECRETS
    assert SECRETS[1].headers == ("authorization",)
    assert parse_secrets("") == () and parse_secrets({}) == ()


def test_allowlist_opens_a_secret_s_hosts_on_https_only() -> None:
    policy = EgressPolicy(Profile.ALLOWLIST, secrets=SECRETS)
    assert policy.judge("api.openai.com", None, 443).allowed
    assert policy.judge("build.corp.example", None, 443).allowed
    assert not policy.judge("api.openai.com", None, 80).allowed
    assert not policy.judge("corp.example", None, 443).allowed
    denied = policy._replace(deny=(parse_rule("api.openai.com"),))
    assert not denied.judge("api.openai.com", None, 443).allowed


def test_under_public_a_secret_s_host_is_judged_like_any_other() -> None:
    policy = EgressPolicy(Profile.PUBLIC, secrets=SECRETS)
    assert not policy.judge("api.openai.com", ipaddress.ip_address("10.0.0.8"), 443).allowed


def test_the_fingerprint_holds_names_hosts_and_headers() -> None:
    base = EgressPolicy(Profile.PUBLIC).fingerprint_value()
    with_secrets = EgressPolicy(Profile.PUBLIC, secrets=SECRETS).fingerprint_value()
    assert "secrets" not in base  # a VM made before secrets existed keeps its fingerprint
    assert with_secrets["secrets"] == {
        "OPENAI_API_KEY": {"hosts": ["api.openai.com"], "headers": []},
        "CORP_TOKEN": {"hosts": ["*.corp.example"], "headers": ["authorization"]},
    }
    other_host = parse_secrets({"OPENAI_API_KEY": ["api2.openai.com"]})
    assert EgressPolicy(secrets=other_host).fingerprint_value() != EgressPolicy(secrets=SECRETS[:1]).fingerprint_value()


def test_none_cannot_hold_a_secret() -> None:
    refusal = EgressPolicy(Profile.NONE, secrets=SECRETS).refusal()
    assert refusal is not None and "OPENAI_API_KEY, CORP_TOKEN" in refusal
    assert EgressPolicy(Profile.NONE).refusal() is None
    assert EgressPolicy(Profile.ALLOWLIST, secrets=SECRETS).refusal() is None


def test_a_values_file() -> None:
    text = ("# mine\n\nOPENAI_API_KEY=sk-abc=def\nexport CORP_TOKEN = \"  spaced  \"\n"
            "QUOTED='it''s'\nEMPTY=\n")
    assert parse_values_file(text) == {"OPENAI_API_KEY": "sk-abc=def", "CORP_TOKEN": "  spaced  ",
                                       "QUOTED": "it''s", "EMPTY": ""}


@pytest.mark.parametrize(("text", "line"), [("just words\n", 1), ("# c\nlower=x\n", 2), ("=x\n", 1)])
def test_a_malformed_values_file_names_the_line(text: str, line: int) -> None:
    with pytest.raises(ValueError, match=f"^line {line}: expected NAME=value"):
        parse_values_file(text)


@pytest.mark.parametrize("value", ["sk-plain", "", "  spaced  ", '"quoted"', "it's", "a#b", "x=y"])
def test_a_written_values_file_reads_back(value: str) -> None:
    values = {"A_TOKEN": value, "OTHER": "2"}
    assert parse_values_file(render_values_file(values)) == values


def test_a_value_on_more_than_one_line_is_not_written() -> None:
    with pytest.raises(ValueError, match="one NAME=value line"):
        render_values_file({"A_TOKEN": "one\ntwo"})
