"""What a user's agent configuration may hold that the screens once let through to the VM, each kept
as a test: a credential below a key with a dot in it (reported as left out, yet copied), a key in a
list, a table or a number, a name of capitals alone, header tables of other shapes, a key behind an
option or in a URL, a `.env` read otherwise by a reader that strips a byte order mark or knows no
unclosed quote, and `crushrc` forms that set a key other than by a plain assignment."""

from __future__ import annotations

import json

import pytest

from opencode_sandbox.core.agent_config import crush_rc, dotenv, json_settings

KEY = "sk-LEAKED123"


def vm_gets(screened_data: bytes | None) -> bool:
    return screened_data is not None and b"LEAKED123" in screened_data


@pytest.mark.parametrize("document", [
    {"mcpServers": {"github.com/modelcontextprotocol/servers/tree/main/src/github": {
        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": KEY}}}},
    {"providers": {"api.deepseek.com": {"apiKey": KEY}}},
    {"my.provider": {"apiKey": KEY}},
    {"apiKey": [KEY]},
    {"apiKey": {"value": KEY}},
    {"token": 123456789012},
    {"apiKey": "AKIALEAKED123"},
    {"mcpServers": {"x": {"headers": [{"name": "Authorization", "value": f"Bearer {KEY}"}]}}},
    {"mcpServers": {"x": {"httpHeaders": {"Authorization": KEY}}}},
    {"requestHeaders": {"X-Key": KEY}},
    {"apiKeys": {"openai": KEY}},
    {"keys": {"openai": KEY}},
    {"cookie": f"session={KEY}"},
    {"mcpServers": {"x": {"args": ["--api-key", KEY]}}},
    {"mcpServers": {"x": {"args": [f"--api-key={KEY}"]}}},
    {"env": {"GH_PAT": KEY}},
    {"baseUrl": f"https://u:{KEY}@example.org/"},
    [{"apiKey": KEY}],
])
def test_no_shape_of_a_json_configuration_takes_a_key_into_the_vm(document: object) -> None:
    screened = json_settings(json.dumps(document).encode(), frozenset())
    assert not vm_gets(screened.data), screened
    assert screened.left_out, "the start says what it kept back"


def test_what_names_a_variable_and_what_says_yes_or_no_is_copied() -> None:
    document = {"apiKey": "OPENAI_API_KEY", "env_key": "${MY_KEY}", "auth": {"selectedType": "gemini-api-key"},
                "disable_auth": True, "default_max_tokens": 4096}
    assert json_settings(json.dumps(document).encode(), frozenset()).left_out == ()


@pytest.mark.parametrize("text", [
    f"\ufeffGEMINI_API_KEY={KEY}\n",
    f'GEMINI_MODEL="gemini-2.5-pro\nGEMINI_API_KEY={KEY}\n',
    f"GOOGLE_CLOUD_PROJECT_PAT={KEY}\n",
])
def test_a_dotenv_read_otherwise_by_another_reader_keeps_its_key_home(text: str) -> None:
    screened = dotenv(text.encode(), frozenset())
    assert not vm_gets(screened.data), screened


@pytest.mark.parametrize("script", [
    f"provider add corp --api-key={KEY}\n",
    f"mcp add x --header=X-Api-Key:{KEY}\n",
    f"mcp add x -H 'Authorization: Bearer {KEY}'\n",
    f"K={KEY}\nexport OPENAI_API_KEY=$K\n",
    f"export OPENAI_API_KEY+={KEY}\n",
    f"OPENAI_API_K\\\nEY={KEY}\n",
    f"printf -v OPENAI_API_KEY %s {KEY}\n",
    f"read -r OPENAI_API_KEY <<EOF\n{KEY}\nEOF\n",
])
def test_a_crushrc_that_sets_a_key_any_way_stays_home(script: str) -> None:
    screened = crush_rc(script.encode(), frozenset())
    assert screened.data is None and screened.left_out, screened
