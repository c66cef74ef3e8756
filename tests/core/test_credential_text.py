"""Credentials found by their shape (`core/credential_text.py`): what is one, what a configuration
holds besides that is none, and the time any text takes."""

from __future__ import annotations

import time

import pytest

from opencode_sandbox.core.credential_text import credential_in, credential_line, is_configuration

FOUND = {
    "anthropic": ("ANTHROPIC_AUTH_TOKEN_2=sk-ant-api03-abcdefgh", "a provider's key"),
    "github": ('"token": "ghp_' + "a1B2" * 9 + '"', "a provider's key"),
    "fine_grained": ("github_pat_11ABCDEFG0123456789_abcdefghij", "a provider's key"),
    "google": ("key=AIzaSyA1234567890abcdefghijklmnopqrstu", "a provider's key"),
    "aws": ("id = AKIAIOSFODNN7EXAMPLE", "a provider's key"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "a provider's key"),
    "pem": ("-----BEGIN OPENSSH PRIVATE KEY-----", "a private key"),
    "url_password": ("postgres://app:hunter2hunter@db.internal/app", "a password in a URL"),
    "url_token_user": ("https://0123456789abcdefghij@github.com/o/r.git", "a key as a URL's user"),
    "query": ("https://server.example/mcp?profile=x&api_key=abcdef123", "a key in a URL's query"),
    "bearer": ("Authorization: Bearer abcdefgh1234", "a bearer token"),
    "header_variable": ("OTEL_EXPORTER_OTLP_HEADERS=Authorization=Basic dXNlcjpwYXNzMTIz", "a bearer token"),
    "named": ('"notify": "curl -F token=a1b2c3d4e5f6a7b8 https://x"', "a key under a credential's name"),
    "header_line": ("curl -H 'DD-API-KEY: 3f2a1c9e8b7d6a5f4e3d2c1b0a9f8e7d'", "a key under a credential's name"),
    "url_path": ("https://mainnet.infura.io/v3/3f2a1c9e8b7d6a5f4e3d2c1b0a9f8e7d", "a key in a URL's path"),
    "webhook": ("https://hooks.slack.com/services/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", "a provider's key"),
    "curl_user": ("curl -u ACabc:Zb3cqXDkBo7FJ https://api.example", "a password after -u"),
    "random_run": ('"notify": "curl -d azGDORePK8gMaC0QOYAMyEEuzJnyUi https://x"', "a key-shaped value"),
}


@pytest.mark.parametrize(("text", "kind"), FOUND.values(), ids=FOUND.keys())
def test_a_credential_is_found_by_its_shape(text: str, kind: str) -> None:
    assert credential_in(text) == kind


NONE = {
    "reference_in_url": "https://${GITLAB_USER}:${GITLAB_TOKEN}@gitlab.example/x",
    "reference_in_header": "Authorization: Bearer ${GITHUB_TOKEN}",
    "reference_in_query": "https://h.example/mcp?api_key=$EXA_API_KEY",
    "placeholder": "Bearer <your token>",
    "ssh_user": "ssh://git@github.com/o/r.git",
    "model_ids": "claude-sonnet-4-5-20250929 gpt-4o-2024-08-06 Qwen2.5-Coder-32B-Instruct gemini-2.5-pro",
    "uuid": "session 3f2504e0-4f89-11d3-9a0c-0305e82c3301",
    "sha256_hex": "commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "integrity": "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUR3nc84wOTs4yAb6A==",
    "camel_words": "disableAllHooks alwaysThinkingEnabled includeCoAuthoredBy",
    "words_about_tokens": "The bearer token expires; basic authentication is off; max_tokens: 4096",
    "keybinding": '{"key": "ctrl+shift+alt+1", "command": "app.interrupt"}',
    "path": '"path": "/home/dev/.local/bin/tool2024"',
    "task_name": "risk-assessment disk-usage ask-question",
    "prose": "Prefer a basic JavaScript helper; basic TypeScript mistakes",
    "local_database": "postgresql://postgres:postgres@localhost:5432/dev",
    "template_query": "https://serpapi.com/search?api_key={API_KEY}&q=x",
    "data_uri": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAABHNCSVQICAgIfAhkiAAAAAlwSFlz",
    "tokenizer": '"tokenizer": "cl100k_base", "max_tokens": 8192, "authType": "oauth-personal"',
}


@pytest.mark.parametrize("text", NONE.values(), ids=NONE.keys())
def test_what_a_configuration_holds_besides_is_none(text: str) -> None:
    assert credential_in(text) is None


def test_a_file_names_the_line_not_the_value() -> None:
    found = credential_line("{\n  \"model\": \"x\",\n  \"apiKeyHelper\": \"echo sk-abcdefgh1234\"\n}\n")
    assert found == "a provider's key, line 3"
    assert "sk-" not in found


def test_a_random_run_counts_in_configuration_alone() -> None:
    run = "azGDORePK8gMaC0QOYAMyEEuzJnyUi"
    assert credential_in(run, configuration=True) == "a key-shaped value"
    assert credential_in(run, configuration=False) is None
    assert [name for name in (".env", "settings.json", "crushrc", "notify.sh", "config") if is_configuration(name)] \
        == [".env", "settings.json", "crushrc", "notify.sh", "config"]
    assert not [name for name in ("SKILL.md", "helper.js", "logo.png") if is_configuration(name)]


HOSTILE = {
    "schemes": "a://" * 250_000,
    "colons": "a://" + ":" * 1_000_000,
    "letters_then_scheme": "a" * 1_000_000 + "://x",
    "users": ("a://" + "x" * 200 + ":") * 4_000,
    "jwt_starts": ("eyJ" + "a" * 100 + " ") * 10_000,
    "bearers": "bearer " * 150_000,
    "queries": "?token=" * 150_000,
    "one_run": "aA1" * 350_000,
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_any_text_takes_linear_time(text: str) -> None:
    started = time.monotonic()
    credential_line(text)
    assert time.monotonic() - started < 2.0, "a megabyte of text takes a fraction of a second"
