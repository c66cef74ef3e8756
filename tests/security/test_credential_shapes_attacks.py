"""The second attack on the screens that decide what of the user's agent configuration reaches the
VM (`core/agent_config.py`, `core/credential_text.py`, `services/provisioning.py`,
`services/regular_files.py`, `config/loader.py`). Each test states the secure behaviour; every one
failed on the code before the text rules. Each leak is tried with a key that has a provider's prefix
and with one that has none (a random run of letters and digits), so the rules beyond the prefixes
are what holds for the second.

Leaks: credentials in shapes real users write (a `*_HEADERS` variable, `mcp-remote --header`,
`docker -e NAME=value`, a URL's query or user part, a shell command string, a password URL in an
`env` block or a `.env`, a name with a suffix after `_KEY`), a `crushrc` alias, and files the screens
never look at (Copilot's `lsp-config.json`, a skill's `.env`). Hostile input: deep nesting (JSON,
TOML, YAML, folders), a quadratic URL pattern, and a YAML alias bomb in a key of the checkout's
`config.yaml`."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_sandbox.core.agent_config import codex_config, crush_rc, dotenv, json_settings
from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.services import provisioning
from opencode_sandbox.services.regular_files import read_tree
from tests.security.test_guard_below_attacks import chain, remove_deep

KEY = "sk-LEAKED123abc"
PLAIN_KEY = "LEAKED123abc456DEF789xyz"
"""A key without a prefix: Mistral's, Pushover's and many others' are 20 to 40 letters and digits."""


def vm_gets(data: bytes | None) -> bool:
    return data is not None and b"LEAKED123" in data


def with_each_key(cases: dict[str, object]) -> dict[str, object]:
    """Every case twice: with `KEY` and with `PLAIN_KEY` in its place."""
    return {**cases, **{f"{name}_plain": json.loads(json.dumps(case).replace(KEY, PLAIN_KEY))
                        for name, case in cases.items()}}


# --- JSON settings (Claude Code, Gemini, Qwen, pi, Droid, Cline, Copilot, crush.json) ---------------

JSON_LEAKS = {
    # an `env` block's text is checked by name only: no URL-password check there
    "env_url_password": {"mcpServers": {"pg": {"env": {"DATABASE_URL": f"postgres://u:{KEY}@db/x"}}}},
    # documented variables whose value is a header line (Claude Code, OpenTelemetry, Notion's MCP server)
    "anthropic_custom_headers": {"env": {"ANTHROPIC_CUSTOM_HEADERS": f"x-api-key: {KEY}"}},
    "otel_headers": {"env": {"OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {KEY}"}},
    "notion_openapi_mcp_headers": {"mcpServers": {"notion": {"env": {
        "OPENAPI_MCP_HEADERS": json.dumps({"Authorization": f"Bearer {KEY}", "Notion-Version": "2022-06-28"})}}}},
    # mcp-remote's documented form, and curl-style -H
    "mcp_remote_header": {"mcpServers": {"x": {"command": "npx", "args": [
        "mcp-remote", "https://mcp.example.org/sse", "--header", f"Authorization: Bearer {KEY}"]}}},
    "mcp_remote_header_eq": {"mcpServers": {"x": {"args": ["mcp-remote", f"--header=Authorization: Bearer {KEY}"]}}},
    "args_dash_H": {"mcpServers": {"x": {"args": ["-H", f"Authorization: Bearer {KEY}"]}}},
    # GitHub MCP server through docker with the token inline
    "docker_e_inline": {"mcpServers": {"github": {"command": "docker", "args": [
        "run", "-i", "--rm", "-e", f"GITHUB_PERSONAL_ACCESS_TOKEN={KEY}", "ghcr.io/github/github-mcp-server"]}}},
    "args_name_eq_value": {"mcpServers": {"x": {"args": [f"OPENAI_API_KEY={KEY}"]}}},
    # remote MCP servers that take the key in the URL (Smithery/Exa style query, a token as user)
    "url_query_key": {"mcpServers": {"x": {"url": f"https://server.smithery.ai/exa/mcp?api_key={KEY}"}}},
    "url_token_as_user": {"mcpServers": {"x": {"args": [f"https://{KEY}@github.com/o/r.git"]}}},
    "url_after_option": {"mcpServers": {"x": {"args": [f"--url=https://u:{KEY}@h.example/"]}}},
    # shell commands the agent runs, written with the key in them
    "claude_api_key_helper": {"apiKeyHelper": f"echo {KEY}"},
    "hook_command_with_token": {"hooks": {"Notification": [{"matcher": "", "hooks": [{"type": "command",
        "command": f"curl -s -F token={KEY} -F user=u https://api.pushover.net/1/messages.json"}]}]}},
    "command_string_api_key": {"mcpServers": {"x": {"command": f"npx some-server --api-key {KEY}"}}},
    # names the pattern misses
    "env_key_with_suffix": {"env": {"OPENAI_API_KEY_WORK": KEY}},
    "env_mysql_pwd": {"env": {"MYSQL_PWD": KEY}},
    "env_smtp_pass": {"env": {"SMTP_PASS": KEY}},
    "passphrase": {"passphrase": KEY},
    "cookies": {"cookies": KEY},
    "session_cookie_camel": {"sessionCookie": KEY},
    "auth_header_camel": {"authHeader": f"Bearer {KEY}"},
    "github_pat_camel": {"githubPat": KEY},
}


JSON_LEAKS = with_each_key(JSON_LEAKS)


@pytest.mark.parametrize("document", JSON_LEAKS.values(), ids=JSON_LEAKS.keys())
def test_json_settings_keep_these_credentials_home(document: object) -> None:
    screened = json_settings(json.dumps(document).encode(), frozenset())
    assert not vm_gets(screened.data), screened


# --- Copilot's lsp-config.json and the folders copied whole ----------------------------------------

def _provision(home: Path, project: Path, agent: str) -> dict[str, bytes]:
    sources = provisioning.agent_sources(profile_of(agent), home, project)
    collected = provisioning.collect_files(sources)
    files, _ = provisioning.without_agent_credentials(collected.files, set())
    return {target: content.data for target, content in files.items()}


def test_copilots_lsp_config_is_screened_like_its_mcp_config(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".copilot").mkdir(parents=True)
    project.mkdir()
    (home / ".copilot/lsp-config.json").write_text(json.dumps(
        {"lspServers": {"x": {"command": "x-lsp", "env": {"GITHUB_TOKEN": KEY}}}}))
    files = _provision(home, project, "copilot")
    assert not vm_gets(files.get(".copilot/lsp-config.json")), "lsp-config.json is not in JSON_CONFIGS"


@pytest.mark.parametrize(("agent", "relative"), [
    ("claude-code", ".claude/skills/notion/.env"),
    ("claude-code", ".claude/skills/notion/config.json"),
    ("copilot", ".copilot/hooks/notify.json"),
    ("pi", ".pi/agent/extensions/web/.env"),
])
def test_a_credential_file_inside_a_copied_folder_stays_home(agent: str, relative: str, tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / relative).parent.mkdir(parents=True)
    project.mkdir()
    text = json.dumps({"apiKey": KEY}) if relative.endswith(".json") else f"NOTION_API_KEY={KEY}\n"
    (home / relative).write_text(text)
    files = _provision(home, project, agent)
    assert not vm_gets(files.get(relative)), f"{relative} is copied unscreened"


def test_the_checkout_cannot_plant_a_login_in_the_vm_home(tmp_path: Path) -> None:
    """`.opencode-sandbox/codex/auth.json` lands on `~/.codex/auth.json`: the agent in the VM then
    works in the repository author's account, which sees the user's prompts and code."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / ".opencode-sandbox/codex").mkdir(parents=True)
    (project / ".opencode-sandbox/codex/auth.json").write_text('{"tokens": {"access_token": "attacker"}}')
    files = _provision(home, project, "codex")
    assert ".codex/auth.json" not in files


# --- Codex's config.toml --------------------------------------------------------------------------

TOML_LEAKS = {
    "base_url_query": f'[model_providers.x]\nbase_url = "https://h.example/v1?key={KEY}"\n',
    "mcp_url_query": f'[mcp_servers.x]\nurl = "https://h.example/mcp?api_key={KEY}"\n',
    "mcp_args_header": (f'[mcp_servers.x]\ncommand = "npx"\n'
                        f'args = ["mcp-remote", "https://h.example", "--header", "Authorization: Bearer {KEY}"]\n'),
    "env_url_password": f'[mcp_servers.pg]\ncommand = "x"\nenv = {{ DATABASE_URL = "postgres://u:{KEY}@h/db" }}\n',
    "shell_set_key_suffix": f'[shell_environment_policy]\nset = {{ OPENAI_API_KEY_2 = "{KEY}" }}\n',
    "notify_curl_header": f'notify = ["curl", "-H", "Authorization: Bearer {KEY}", "https://ntfy.sh/x"]\n',
}


TOML_LEAKS = with_each_key(TOML_LEAKS)


@pytest.mark.parametrize("text", TOML_LEAKS.values(), ids=TOML_LEAKS.keys())
def test_codex_config_with_a_credential_stays_home(text: str) -> None:
    assert not vm_gets(codex_config(text.encode(), frozenset()).data)


# --- .env (Gemini CLI, Qwen Code) -----------------------------------------------------------------

DOTENV_LEAKS = {
    "proxy_url_password": f"HTTPS_PROXY=http://user:{KEY}@proxy.corp:8080\n",
    "key_with_suffix": f"GEMINI_API_KEY_WORK={KEY}\n",
    "otel_headers": f"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer {KEY}\n",
    "mysql_pwd": f"MYSQL_PWD={KEY}\n",
    # dotenv's `\s*` is JavaScript's and takes U+FEFF anywhere in the indent; only a leading one is stripped here
    "bom_after_tab": f"\t\ufeffGEMINI_API_KEY={KEY}\n",
    # dotenv ends a double-quoted value at an unescaped quote only; the screen at any quote
    "escaped_quote_in_multiline_key": f'GOOGLE_PRIVATE_KEY="-----BEGIN-----\nab\\"cd\n{KEY}\n-----END-----"\n',
}


DOTENV_LEAKS = with_each_key(DOTENV_LEAKS)


@pytest.mark.parametrize("text", DOTENV_LEAKS.values(), ids=DOTENV_LEAKS.keys())
def test_dotenv_keeps_these_credentials_home(text: str) -> None:
    assert not vm_gets(dotenv(text.encode(), frozenset()).data)


# --- crushrc --------------------------------------------------------------------------------------

CRUSHRC_LEAKS = {
    "alias_with_option": f"alias crush='crush --api-key {KEY}'\n",
    "alias_with_assignment": f'alias c="OPENAI_API_KEY={KEY} crush"\n',
    "variable_holding_options": f'export CRUSH_ARGS="--api-key {KEY}"\n',
    "headers_variable": f"export OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer {KEY}'\n",
    "token_as_url_user": f"git clone https://{KEY}@github.com/o/r\n",
}


CRUSHRC_LEAKS = with_each_key(CRUSHRC_LEAKS)


@pytest.mark.parametrize("text", CRUSHRC_LEAKS.values(), ids=CRUSHRC_LEAKS.keys())
def test_crushrc_with_a_credential_stays_home(text: str) -> None:
    assert not vm_gets(crush_rc(text.encode(), frozenset()).data)


# --- hostile input: the checkout's .opencode-sandbox/<agent>/ and config.yaml ---------------------

@pytest.mark.parametrize("data", [b"[" * 5000 + b"]" * 5000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
                                  b"[" * 995 + b"]" * 995],  # the last one parses, then the screen recurses
                         ids=["list_5000", "object_5000", "list_995"])
def test_deep_json_is_refused_not_a_crash(data: bytes) -> None:
    assert json_settings(data, frozenset()).data is None


@pytest.mark.parametrize("data", [b"a = " + b"[" * 500 + b"]" * 500, b"a = " + b"{b=" * 500 + b"1" + b"}" * 500],
                         ids=["array_500", "inline_table_500"])
def test_deep_toml_is_refused_not_a_crash(data: bytes) -> None:
    assert codex_config(data, frozenset()).data is None


def test_a_long_url_like_value_is_screened_in_linear_time() -> None:
    """URL_WITH_PASSWORD backtracks quadratically over `:`: 64 KB take 12 s, 1 MB most of an hour."""
    document = json.dumps({"x": "a://" + ":" * 40000}).encode()
    started = time.monotonic()
    json_settings(document, frozenset())
    assert time.monotonic() - started < 1.0


def test_a_deep_folder_in_the_checkout_is_no_crash(tmp_path: Path) -> None:
    project = tmp_path / "project"
    top = project / ".opencode-sandbox/claude-code"
    top.mkdir(parents=True)
    (top / "CLAUDE.md").write_text("Be brief.\n")
    try:
        os.close(chain(top, "a", 1100))  # 2.2 KB of path: git checks this out
        tree = read_tree(top, project)
        assert tree.files["CLAUDE.md"].data == b"Be brief.\n", "what the top holds is still read"
        assert [path for path in tree.skipped if path.startswith("a/")], "the folders past the depth are named"
    finally:
        remove_deep(project)


_LOAD = ("import sys\nfrom pathlib import Path\nfrom opencode_sandbox.config import loader\n"
         "from opencode_sandbox.errors import SandboxError\n"
         "try:\n    loader.read_file(Path(sys.argv[1]))\n"
         "except SandboxError as error:\n    print(len(error.message))\n")


def _load_limited(config: Path) -> subprocess.CompletedProcess[str]:
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    return subprocess.run([sys.executable, "-c", _LOAD, str(config)], capture_output=True, text=True,
                          timeout=60, preexec_fn=limited, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_an_alias_bomb_in_a_key_of_the_checkouts_config_is_a_short_error(tmp_path: Path) -> None:
    """`str(key_node)` in `loader.read_file` spells a non-scalar key out, aliases expanded."""
    lines = ["? - &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  - &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]" for level in range(1, 9)]
    config = tmp_path / "config.yaml"
    config.write_text("\n".join(lines) + "\n: 1\n")
    assert len(config.read_bytes()) < 600
    done = _load_limited(config)
    assert done.returncode == 0, done.stderr[-500:]


def test_deep_yaml_in_the_checkouts_config_is_a_short_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("agent: " + "[" * 5000 + "]" * 5000 + "\n")
    done = _load_limited(config)
    assert done.returncode == 0, done.stderr[-500:]
