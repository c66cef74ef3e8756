"""The third attack on the screens of an agent's configuration: the shapes of
`core/credential_text.py`, the screens of `core/agent_config.py` and the last look at every file in
`services/provisioning.py::without_agent_credentials`. Each test states the secure (or usable)
behaviour, and failed on the code before it.

Leaks: a secret in a URL's path (Slack and Discord webhooks, RPC URLs), keys in hexadecimal, UUIDs or
with a `/`, prefixes the list lacked, files outside the named screens (a skill's `.env`), a UTF-16
file. The checkout: a TOML integer of 5,000 digits, a megabyte of newlines. Files without a
credential that must still be copied: `basic JavaScript` in prose, a template's `{API_KEY}`, a
database on localhost, a data URI, a `$NAME` reference."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.services import provisioning

SLACK = "https://hooks.slack.com/services/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"
SLACK_SECRET = "Zb3cqXDkBo7FJwY9qKfQ1nTr"
DISCORD = ("https://discord.com/api/webhooks/1234567890123456789/"
           "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz01")
HEX32 = "3f2a1c9e8b7d6a5f4e3d2c1b0a9f8e7d"


def provision(tmp_path: Path, agent: str, home_files: dict[str, str | bytes],
              checkout_files: dict[str, str | bytes] | None = None) -> tuple[dict[str, bytes], list[str]]:
    """What the VM gets: the product's own path from the files to the tar."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(parents=True, exist_ok=True)
    for root, found in ((home, home_files), (project / ".opencode-sandbox", checkout_files or {})):
        for relative, text in found.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
    collected = provisioning.collect_files(provisioning.agent_sources(profile_of(agent), home, project))
    files, left_out = provisioning.without_agent_credentials(collected.files, set())
    return {target: content.data for target, content in files.items()}, left_out


def reaches_vm(files: dict[str, bytes], secret: str | bytes) -> bool:
    needle = secret if isinstance(secret, bytes) else secret.encode()
    return any(needle in data for data in files.values())


# --- HIGH: credentials that reach the VM ------------------------------------------------------

def _hook(command: str) -> str:
    return json.dumps({"hooks": {"Stop": [{"matcher": "", "hooks": [{"type": "command", "command": command}]}]}})


SCREENED_LEAKS = {
    # Claude Code's Stop hook posting to Slack: the webhook's secret follows `/`, never a random run
    "claude_hook_slack_webhook": ("claude-code", ".claude/settings.json",
                                  _hook(f"curl -s -d '{{\"text\":\"done\"}}' {SLACK}"), SLACK_SECRET),
    "claude_env_slack_webhook_url": ("claude-code", ".claude/settings.json",
                                     json.dumps({"env": {"SLACK_WEBHOOK_URL": SLACK}}), SLACK_SECRET),
    "claude_env_discord_webhook": ("claude-code", ".claude/settings.json",
                                   json.dumps({"env": {"DISCORD_WEBHOOK": DISCORD}}), DISCORD[-20:]),
    # a header in a hook's command whose key is 32 lowercase hex (Datadog, Azure, OpenWeather, Twilio)
    "claude_hook_datadog_header": ("claude-code", ".claude/settings.json",
                                   _hook(f"curl -X POST -H 'DD-API-KEY: {HEX32}' https://api.datadoghq.com/api/v1/events"),
                                   HEX32),
    "claude_hook_curl_user_password": ("claude-code", ".claude/settings.json",
                                       _hook(f"curl -u AC{HEX32}:{HEX32[::-1]} https://api.twilio.com/x"), HEX32[::-1]),
    # Codex's notify program, the documented place for a notification hook
    "codex_notify_slack": ("codex", ".codex/config.toml",
                           f'notify = ["bash", "-c", "curl -s -d done {SLACK}"]\n', SLACK_SECRET),
    "codex_mcp_rpc_url_path_key": ("codex", ".codex/config.toml",
                                   '[mcp_servers.eth]\ncommand = "npx"\n'
                                   'args = ["-y", "evm-mcp", "--rpc", "https://eth-mainnet.g.alchemy.com/v2/'
                                   'Xk9pQ2rT7vWm3nB8cL5dF1gH4jK6sA0e"]\n', "Xk9pQ2rT7vWm3nB8cL5dF1gH4jK6sA0e"),
    # Gemini CLI's .env: a name the pattern does not know, a value the shapes do not know
    "gemini_env_slack_webhook": ("gemini", ".gemini/.env", f"SLACK_WEBHOOK={SLACK}\n", SLACK_SECRET),
    "gemini_settings_mcp_infura": ("gemini", ".gemini/settings.json", json.dumps({"mcpServers": {"eth": {
        "command": "npx", "args": ["evm-mcp", f"https://mainnet.infura.io/v3/{HEX32}"]}}}), HEX32),
}


@pytest.mark.parametrize(("agent", "relative", "text", "secret"), SCREENED_LEAKS.values(), ids=SCREENED_LEAKS.keys())
def test_screened_file_keeps_credential_home(agent: str, relative: str, text: str, secret: str, tmp_path: Path) -> None:
    files, _ = provision(tmp_path, agent, {relative: text})
    assert not reaches_vm(files, secret)


# Files outside SCREENS (skills, hooks, extensions) get the shape look only: no name rule at all.
SKILL_ENV_LEAKS = {
    "azure_openai_hex": ("AZURE_OPENAI_API_KEY", HEX32),
    "elevenlabs_sk_underscore": ("ELEVENLABS_API_KEY", "sk_" + HEX32 + HEX32[:16]),
    "supabase_pat": ("SUPABASE_ACCESS_TOKEN", "sbp_" + HEX32 + "0a1b2c3d"),
    "sentry_user_token": ("SENTRY_AUTH_TOKEN", "sntryu_" + HEX32 * 2),
    "perplexity": ("PERPLEXITY_API_KEY", "pplx-" + HEX32 + HEX32[:16]),
    "aws_secret_access_key": ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "exa_uuid": ("EXA_API_KEY", "0f8fad5b-d9cb-469f-a165-70867728950e"),
    "slack_app_token": ("SLACK_APP_TOKEN", "xapp-1-A0123456789-1234567890123-" + HEX32 * 2),
    "mistral_one_digit": ("MISTRAL_API_KEY", "AbCdEfGhIjKlMnOpQrStUvWxYz1aBcDe"),  # ~3% of random 32-char keys
}


@pytest.mark.parametrize("agent_and_path", [
    ("claude-code", ".claude/skills/tts/.env"), ("codex", ".codex/skills/tts/.env"),
    ("copilot", ".copilot/hooks/.env"), ("pi", ".pi/agent/extensions/tts/.env"), ("droid", ".factory/skills/tts/.env"),
], ids=lambda pair: pair[0])
@pytest.mark.parametrize(("name", "key"), SKILL_ENV_LEAKS.values(), ids=SKILL_ENV_LEAKS.keys())
def test_named_key_in_a_skills_env_stays_home(agent_and_path: tuple[str, str], name: str, key: str,
                                              tmp_path: Path) -> None:
    agent, relative = agent_and_path
    files, _ = provision(tmp_path, agent, {relative: f"{name}={key}\n"})
    assert not reaches_vm(files, key)


def test_skill_json_with_named_key_stays_home(tmp_path: Path) -> None:
    files, _ = provision(tmp_path, "claude-code", {".claude/skills/x/config.json": json.dumps({"apiKey": HEX32})})
    assert not reaches_vm(files, HEX32)


def test_utf16_gemini_env_is_not_copied_with_its_key(tmp_path: Path) -> None:
    """UTF-16LE without a BOM decodes as UTF-8 (NULs), so no assignment is seen; the final look reads latin-1."""
    key = "sk-LEAKED123abcDEF456"
    files, _ = provision(tmp_path, "gemini", {".gemini/.env": f"GEMINI_API_KEY={key}\n".encode("utf-16-le")})
    assert not reaches_vm(files, key.encode("utf-16-le"))


def test_utf16_skill_env_with_bom_is_not_copied(tmp_path: Path) -> None:
    key = "sk-LEAKED123abcDEF456"
    files, _ = provision(tmp_path, "claude-code", {".claude/skills/x/.env": f"OPENAI_API_KEY={key}\n".encode("utf-16")})
    assert not reaches_vm(files, key.encode("utf-16-le"))


def test_json_escape_before_a_prefixed_key(tmp_path: Path) -> None:
    """`\\nsk-...` in raw JSON: the `n` of the escape defeats KNOWN_KEY's look-behind (low)."""
    key = "sk-proj-LEAKED123abcDEF456"
    files, _ = provision(tmp_path, "claude-code",
                         {".claude/skills/x/notes.json": json.dumps({"setup": f"Your OpenAI key:\n{key}"})})
    assert not reaches_vm(files, key)


def test_gzip_in_a_skill_is_looked_into(tmp_path: Path) -> None:
    key = "sk-proj-LEAKED123abcDEF456"
    files, _ = provision(tmp_path, "claude-code",
                         {".claude/skills/x/cache.json.gz": gzip.compress(json.dumps({"apiKey": key}).encode())})
    assert ".claude/skills/x/cache.json.gz" not in files


def test_pgp_private_key_block(tmp_path: Path) -> None:
    block = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXleaked\n-----END PGP PRIVATE KEY BLOCK-----\n"
    files, _ = provision(tmp_path, "claude-code", {".claude/skills/sign/key.asc": block})
    assert not reaches_vm(files, "lQOYBGXleaked")


# --- MEDIUM: the checkout crashes or slows the host -------------------------------------------

def test_checkouts_codex_config_with_a_huge_integer_is_refused_not_a_crash(tmp_path: Path) -> None:
    """tomllib raises a bare ValueError (int max str digits) that `codex_config` does not catch."""
    files, left_out = provision(tmp_path, "codex", {}, {"codex/config.toml": "x = " + "1" * 5000 + "\n"})
    assert ".codex/config.toml" not in files and left_out


@pytest.mark.parametrize(("agent", "relative"), [("crush", "crush/crushrc")])
def test_checkout_file_of_one_megabyte_of_newlines_is_screened_within_a_second(agent: str, relative: str,
                                                                                 tmp_path: Path) -> None:
    started = time.monotonic()
    provision(tmp_path, agent, {}, {relative: b"\n" * (1 << 20)})
    assert time.monotonic() - started < 1.0


# --- MEDIUM/LOW: credential-free files withheld ----------------------------------------------

FALSE_POSITIVES = {
    "claude_md_basic_javascript": ("claude-code", ".claude/CLAUDE.md",
                                   "# Style\n\n- Prefer a basic JavaScript helper over a dependency.\n"),
    "agent_md_basic_typescript": ("claude-code", ".claude/agents/reviewer.md",
                                  "---\nname: reviewer\n---\nFlag basic TypeScript mistakes.\n"),
    "skill_python_fstring_query": ("claude-code", ".claude/skills/search/search.py",
                                   "import os, requests\nAPI_KEY = os.environ['SERPAPI_API_KEY']\n"
                                   "r = requests.get(f'https://serpapi.com/search?api_key={API_KEY}&q=x')\n"),
    "skill_md_local_postgres_url": ("claude-code", ".claude/skills/db/SKILL.md",
                                    "---\nname: db\n---\nThe dev database is "
                                    "`postgresql://postgres:postgres@localhost:5432/dev`.\n"),
    "skill_json_data_uri_icon": ("claude-code", ".claude/skills/x/manifest.json", json.dumps({"icon": (
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAABHNCSVQICAgIfAhkiAAAAAlwSFlz")})),
}


@pytest.mark.parametrize(("agent", "relative", "text"), FALSE_POSITIVES.values(), ids=FALSE_POSITIVES.keys())
def test_credential_free_file_is_copied(agent: str, relative: str, text: str, tmp_path: Path) -> None:
    files, left_out = provision(tmp_path, agent, {relative: text})
    assert relative in files, left_out


def test_gemini_dollar_reference_is_kept(tmp_path: Path) -> None:
    """Gemini CLI expands `$NAME` in settings.json; the entry is dropped as if it were a key (low)."""
    text = json.dumps({"mcpServers": {"github": {
        "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "$GITHUB_TOKEN"}}}})
    files, left_out = provision(tmp_path, "gemini", {".gemini/settings.json": text})
    assert b"$GITHUB_TOKEN" in files[".gemini/settings.json"], left_out
