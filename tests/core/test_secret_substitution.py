"""Where the docker runtime's proxy puts a secret's value, and what it refuses."""

from __future__ import annotations

from opencode_sandbox.core.secret_substitution import placeholder, substitute
from opencode_sandbox.core.secrets import parse_secrets

SECRETS = parse_secrets({"OPENAI_API_KEY": ["api.openai.com"], "OPENAI_API_KEY_2": ["*.example.org"],
                         "TOKEN": {"hosts": ["git.example.com"], "headers": ["x-token"]}})
VALUES = {"OPENAI_API_KEY": "sk-real-1", "OPENAI_API_KEY_2": "sk-real-2", "TOKEN": "tok-real"}
BEARER = ("Authorization", "Bearer " + placeholder("OPENAI_API_KEY"))


def test_the_placeholder_is_the_one_msb_gives_the_vm() -> None:
    assert placeholder("OPENAI_API_KEY") == "$MSB_OPENAI_API_KEY"


def test_the_value_goes_over_https_to_the_secrets_host_in_any_header() -> None:
    done = substitute(SECRETS, VALUES, "api.openai.com", 443, True, [("Host", "api.openai.com"), BEARER])
    assert done.refusal is None
    assert done.headers == (("Host", "api.openai.com"), ("Authorization", "Bearer sk-real-1"))


def test_a_longer_name_is_not_taken_for_a_shorter_one() -> None:
    done = substitute(SECRETS, VALUES, "api.example.org", 443, True,
                      [("Authorization", "Bearer " + placeholder("OPENAI_API_KEY_2"))])
    assert done.refusal is None and done.headers == (("Authorization", "Bearer sk-real-2"),)


def test_only_the_named_header_fields_carry_a_value() -> None:
    mark = placeholder("TOKEN")
    done = substitute(SECRETS, VALUES, "git.example.com", 443, True, [("X-Token", mark), ("Authorization", mark)])
    assert done.refusal is None and done.headers == (("X-Token", "tok-real"), ("Authorization", mark))


def test_a_placeholder_to_another_host_is_refused_and_nothing_is_put_in() -> None:
    for elsewhere, headers in [((), [BEARER]), (("https://evil.example/?k=" + placeholder("OPENAI_API_KEY"),), []),
                               (("", "key=" + placeholder("OPENAI_API_KEY")), [])]:
        done = substitute(SECRETS, VALUES, "evil.example", 443, True, headers, elsewhere)
        assert done.refusal is not None and "placeholder of the secret OPENAI_API_KEY to evil.example" in done.refusal
        assert "sk-real" not in str(done.headers)


def test_plain_http_to_the_secrets_host_is_refused() -> None:
    done = substitute(SECRETS, VALUES, "api.openai.com", 80, False, [BEARER])
    assert done.refusal is not None and "over plain HTTP to api.openai.com" in done.refusal
    assert done.headers == (BEARER,)


def test_without_the_value_the_request_is_refused_rather_than_sent_with_the_placeholder() -> None:
    done = substitute(SECRETS, {}, "api.openai.com", 443, True, [BEARER])
    assert done.refusal is not None and "holds no value for the secret OPENAI_API_KEY" in done.refusal


def test_a_request_without_placeholders_passes_unchanged() -> None:
    done = substitute(SECRETS, VALUES, "evil.example", 443, True, [("Accept", "*/*")], ("https://evil.example/",))
    assert done == substitute((), {}, "evil.example", 443, True, [("Accept", "*/*")])
    assert done.refusal is None and done.headers == (("Accept", "*/*"),)
