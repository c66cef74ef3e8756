"""The credential screens of Factory Droid's, Cline's and GitHub Copilot CLI's configuration: what
a start copies of the user's home into the VM, and what it leaves on the host and names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opencode_sandbox.core.agent_config import SCREENS, json_settings
from opencode_sandbox.core.agent_config_files import SCREENED
from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.core.credential_text import is_credential
from opencode_sandbox.services import provisioning

REAL = "sk-REAL-VALUE-7f3e"


def copied(agent: str, home: Path, project: Path, secret_names: set[str]) -> tuple[dict[str, bytes], list[str]]:
    project.mkdir(exist_ok=True)
    collected = provisioning.collect_files(provisioning.agent_sources(profile_of(agent), home, project))
    files, left_out = provisioning.without_agent_credentials(collected.files, secret_names)
    return {target: content.data for target, content in files.items()}, left_out


def write(home: Path, path: str, document: object) -> None:
    (home / path).parent.mkdir(parents=True, exist_ok=True)
    (home / path).write_text(json.dumps(document))


def test_droids_custom_model_keeps_its_key_by_name_and_loses_a_written_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home, ".factory/settings.json", {"customModels": [
        {"model": "m1", "baseUrl": "https://models.example.org/v1", "apiKey": "${MODELS_KEY}"},
        {"model": "m2", "baseUrl": "https://other.example.org/v1", "apiKey": REAL}]})
    write(home, ".factory/mcp.json", {"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": REAL}},
                                                     "web": {"url": "https://mcp.example.org",
                                                             "headers": {"X-Api": REAL}}}})
    (home / ".factory" / "AGENTS.md").write_text("Be brief.\n")
    files, left_out = copied("droid", home, tmp_path / "project", set())
    assert left_out == ["~/.factory/settings.json: customModels.1.apiKey",
                        "~/.factory/mcp.json: mcpServers.gh.env.GITHUB_TOKEN",
                        "~/.factory/mcp.json: mcpServers.web.headers"]
    settings = json.loads(files[".factory/settings.json"])
    assert settings["customModels"] == [
        {"model": "m1", "baseUrl": "https://models.example.org/v1", "apiKey": "${MODELS_KEY}"},
        {"model": "m2", "baseUrl": "https://other.example.org/v1"}]
    assert files[".factory/AGENTS.md"] == b"Be brief.\n"
    assert not [target for target, data in files.items() if REAL.encode() in data]


@pytest.mark.parametrize("stand_in", ["ollama", "none", "not-needed", "lm-studio"])
def test_a_local_models_stand_in_word_is_kept_where_a_key_would_be_left_out(tmp_path: Path, stand_in: str) -> None:
    home = tmp_path / "home"
    write(home, ".factory/settings.json", {"customModels": [
        {"model": "llama3", "baseUrl": "http://localhost:11434/v1", "apiKey": stand_in},
        {"model": "m2", "baseUrl": "https://other.example.org/v1", "apiKey": "Ollama7Key"}]})
    files, left_out = copied("droid", home, tmp_path / "project", set())
    assert left_out == ["~/.factory/settings.json: customModels.1.apiKey"], "a word with capitals or digits may be one"
    assert json.loads(files[".factory/settings.json"])["customModels"] == [
        {"model": "llama3", "baseUrl": "http://localhost:11434/v1", "apiKey": stand_in},
        {"model": "m2", "baseUrl": "https://other.example.org/v1"}]


def test_clines_provider_is_copied_without_its_key_or_its_sign_in(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home, ".cline/data/settings/providers.json", {"version": 1, "lastUsedProvider": "openai-compatible",
                                                        "providers": {
        "openai-compatible": {"settings": {"provider": "openai-compatible", "apiKey": REAL, "model": "m",
                                           "baseUrl": "https://models.example.org/v1"}},
        "cline": {"settings": {"provider": "cline", "auth": {"accessToken": REAL, "refreshToken": REAL,
                                                             "expiresAt": 1}}}}})
    (home / ".cline" / "data" / "secrets.json").write_text(json.dumps({"openAiApiKey": REAL}))
    (home / ".cline" / "rules").mkdir(parents=True)
    (home / ".cline" / "rules" / "style.md").write_text("Short.\n")
    files, left_out = copied("cline", home, tmp_path / "project", set())
    assert left_out == [
        "~/.cline/data/settings/providers.json: providers.openai-compatible.settings.apiKey",
        "~/.cline/data/settings/providers.json: providers.cline.settings.auth.accessToken",
        "~/.cline/data/settings/providers.json: providers.cline.settings.auth.refreshToken"]
    providers = json.loads(files[".cline/data/settings/providers.json"])["providers"]
    assert providers["openai-compatible"]["settings"] == {"provider": "openai-compatible", "model": "m",
                                                          "baseUrl": "https://models.example.org/v1"}
    assert files[".cline/rules/style.md"] == b"Short.\n"
    assert ".cline/data/secrets.json" not in files
    assert not [target for target, data in files.items() if REAL.encode() in data]


def test_copilots_settings_and_mcp_servers_come_without_credentials_and_its_login_stays(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home, ".copilot/settings.json", {"theme": "dim", "trustedFolders": ["/workspace"]})
    write(home, ".copilot/mcp-config.json", {"mcpServers": {"gh": {"type": "http", "url": "https://mcp.example.org",
                                                                   "headers": {"Authorization": f"Bearer {REAL}"}}}})
    write(home, ".copilot/config.json", {"copilot_tokens": {"https://github.com:me": REAL}})
    files, left_out = copied("copilot", home, tmp_path / "project", set())
    assert left_out == ["~/.copilot/mcp-config.json: mcpServers.gh.headers"]
    assert json.loads(files[".copilot/settings.json"]) == {"theme": "dim", "trustedFolders": ["/workspace"]}
    assert ".copilot/config.json" not in files, "its sign-in stays on the host"
    assert not [target for target, data in files.items() if REAL.encode() in data]


def test_a_secrets_name_is_left_out_whatever_the_entry_is_called(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home, ".factory/settings.json", {"env": {"CORP_GATEWAY": REAL, "LANG": "C"}})
    files, left_out = copied("droid", home, tmp_path / "project", {"CORP_GATEWAY"})
    assert left_out == ["~/.factory/settings.json: env.CORP_GATEWAY"]
    assert json.loads(files[".factory/settings.json"]) == {"env": {"LANG": "C"}}


@pytest.mark.parametrize(("name", "credential"), [
    ("accessToken", True), ("awsSecretKey", True), ("openAiApiKey", True), ("apiKey", True),
    ("maxOutputTokens", False), ("model", False), ("baseUrl", False), ("keyboard", False),
])
def test_camel_case_names_that_hold_a_credential_are_told_apart(name: str, credential: bool) -> None:
    assert is_credential(name) is credential


def test_every_json_file_an_agent_copies_that_can_hold_a_credential_is_screened() -> None:
    for target in (".factory/settings.json", ".factory/mcp.json", ".cline/data/settings/providers.json",
                   ".cline/data/settings/cline_mcp_settings.json", ".copilot/settings.json",
                   ".copilot/mcp-config.json"):
        assert SCREENS[target] is json_settings
        assert any(source.target == target for name in ("droid", "cline", "copilot")
                   for source in profile_of(name).config)


def test_a_file_that_is_not_json_is_not_copied() -> None:
    assert json_settings(b"{not json", frozenset()).data is None


def test_every_screened_file_is_named_where_a_start_looks_before_loading_the_screens() -> None:
    assert set(SCREENS) == SCREENED


def test_a_screened_file_is_screened_on_opencodes_start_too(tmp_path: Path) -> None:
    settings = {"env": {"ANTHROPIC_API_KEY": REAL}}
    files = {".claude/settings.json": provisioning.Content(json.dumps(settings).encode(), 0o600, 0.0)}
    kept, left_out = provisioning.without_agent_credentials(files, set(), every_file=False)
    assert left_out == ["~/.claude/settings.json: env.ANTHROPIC_API_KEY"]
    assert REAL.encode() not in kept[".claude/settings.json"].data


def test_a_start_with_nothing_to_screen_loads_neither_the_screens_nor_the_credential_patterns() -> None:
    probe = ("import sys\nfrom opencode_sandbox.services import provisioning\n"
             "files = {'.config/opencode/opencode.json': provisioning.Content(b'{}', 0o600, 0.0)}\n"
             "assert provisioning.without_agent_credentials(files, set(), every_file=False) == (files, [])\n"
             "print(sorted(name for name in sys.modules if name.endswith(('agent_config', 'credential_text'))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"
