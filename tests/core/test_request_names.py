"""The names of a proxied request's server must agree before the policy judges it or a secret goes in."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.request_names import disagreement, host_of_authority

API = "api.example.org"


@pytest.mark.parametrize(("authority", "host"), [
    ("api.example.org", API), ("API.Example.org.:443", API), ("[2001:db8::1]:8443", "2001:db8::1"),
    ("2001:db8::1", "2001:db8::1"), ("10.0.0.1:80", "10.0.0.1"),
])
def test_the_host_of_an_authority(authority: str, host: str) -> None:
    assert host_of_authority(authority) == host


def test_names_that_agree_pass_whatever_their_case_or_trailing_dot() -> None:
    assert disagreement(API, "Api.Example.Org", "api.example.org.", API, tls=True) is None
    assert disagreement(API, f"{API}:443", None, API, tls=True) is None  # no SNI: the host is the checked name
    assert disagreement(API, API, None, None, tls=False) is None  # plain HTTP
    assert disagreement("203.0.113.9", None, None, None, tls=True) is None  # an address: no name to check
    assert disagreement(API, None, None, None, tls=False) is None


@pytest.mark.parametrize(("host_header", "client_sni", "server_sni", "tls", "said"), [
    ("evil.example.net", "evil.example.net", "evil.example.net", True, "the TLS name (SNI) evil.example.net"),
    ("evil.example.net", API, API, True, "the Host header names evil.example.net"),
    (API, None, "evil.example.net", True, "checked for evil.example.net"),
    (API, None, None, True, "checked for no name"),
    ("evil.example.net", None, None, False, "the Host header names evil.example.net"),
])
def test_a_request_that_names_another_site_is_refused(host_header: str, client_sni: str | None,
                                                      server_sni: str | None, tls: bool, said: str) -> None:
    reason = disagreement(API, host_header, client_sni, server_sni, tls)
    assert reason is not None and said in reason and API in reason


def test_a_request_target_naming_another_server_disagrees() -> None:
    from opencode_sandbox.core.request_names import target_disagreement

    assert target_disagreement("", "api.openai.com", 443) is None, "origin form names nothing"
    assert target_disagreement("api.openai.com", "api.openai.com", 443) is None
    assert target_disagreement("API.openai.com.:443", "api.openai.com", 443) is None
    assert "names evil.example" in (target_disagreement("evil.example", "api.openai.com", 443) or "")
    assert "names evil.example" in (target_disagreement("evil.example:443", "api.openai.com", 443) or "")
    assert "port 8443" in (target_disagreement("api.openai.com:8443", "api.openai.com", 443) or "")
    assert "names ::1" in (target_disagreement("[::1]:443", "api.openai.com", 443) or "")
    assert target_disagreement("[::1]:443", "::1", 443) is None
