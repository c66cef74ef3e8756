"""pi's and Crush's configuration as a start copies it into the VM: what can carry a credential
stays on the host, and what names a variable of the VM's environment is copied as it is."""

from __future__ import annotations

import json
from pathlib import Path

from opencode_sandbox.core.agent_config import crush_rc
from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.services import provisioning

REAL_KEY = "sk-real-provider-key-4f1d"


def _copied(agent: str, home: Path, project: Path,
            secrets: frozenset[str] = frozenset()) -> tuple[dict[str, bytes], list[str]]:
    collected = provisioning.collect_files(provisioning.agent_sources(profile_of(agent), home, project))
    files, left_out = provisioning.without_agent_credentials(collected.files, set(secrets))
    return {target: content.data for target, content in files.items()}, left_out


def test_pis_models_keep_a_variables_name_and_lose_a_literal_key_and_headers(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    folder = home / ".pi" / "agent"
    folder.mkdir(parents=True)
    project.mkdir()
    (folder / "models.json").write_text(json.dumps({"providers": {
        "scripted": {"baseUrl": "https://models.example.org/v1", "api": "openai-completions",
                     "apiKey": "OPENAI_API_KEY", "models": [{"id": "m"}]},
        "corp": {"baseUrl": "https://llm.corp.example/v1", "apiKey": REAL_KEY,
                 "headers": {"x-portkey-api-key": "pk-real"}, "models": [{"id": "n"}]},
    }}))
    (folder / "settings.json").write_text(json.dumps({"defaultProvider": "scripted", "theme": "light"}))
    (folder / "auth.json").write_text(json.dumps({"anthropic": {"type": "api_key", "key": REAL_KEY}}))
    (folder / "AGENTS.md").write_text("Keep notes short.\n")

    files, left_out = _copied("pi", home, project)

    assert left_out == ["~/.pi/agent/models.json: providers.corp.apiKey",
                        "~/.pi/agent/models.json: providers.corp.headers"]
    providers = json.loads(files[".pi/agent/models.json"])["providers"]
    assert providers["scripted"]["apiKey"] == "OPENAI_API_KEY", "a variable's name is no key"
    assert "apiKey" not in providers["corp"] and providers["corp"]["baseUrl"] == "https://llm.corp.example/v1"
    assert json.loads(files[".pi/agent/settings.json"]) == {"defaultProvider": "scripted", "theme": "light"}
    assert files[".pi/agent/AGENTS.md"] == b"Keep notes short.\n"
    assert ".pi/agent/auth.json" not in files, "pi's logins are never copied"
    assert not [target for target, data in files.items() if REAL_KEY.encode() in data or b"pk-real" in data]


def test_the_checkouts_pi_folder_is_copied_over_the_users_and_screened_the_same(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".pi" / "agent").mkdir(parents=True)
    (home / ".pi" / "agent" / "settings.json").write_text('{"theme": "dark"}')
    ours = project / ".opencode-sandbox" / "pi"
    ours.mkdir(parents=True)
    (ours / "settings.json").write_text(json.dumps({"theme": "light", "env": {"GITHUB_TOKEN": "ghp_real"}}))

    files, left_out = _copied("pi", home, project)

    assert json.loads(files[".pi/agent/settings.json"]) == {"theme": "light", "env": {}}
    assert left_out == ["~/.pi/agent/settings.json: env.GITHUB_TOKEN"]


def test_crush_json_keeps_a_reference_to_the_environment_and_loses_a_literal_key(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    folder = home / ".config" / "crush"
    folder.mkdir(parents=True)
    project.mkdir()
    (folder / "crush.json").write_text(json.dumps({
        "providers": {
            "scripted": {"type": "openai-compat", "base_url": "https://models.example.org/v1",
                         "api_key": "$OPENAI_API_KEY"},
            "corp": {"type": "openai-compat", "api_key": REAL_KEY, "extra_headers": {"x-team": "t-real"}},
        },
        "mcp": {"github": {"type": "http", "url": "https://mcp.example.org", "headers": {"Authorization": "x"},
                           "oauth_client_secret": "${GITHUB_MCP_SECRET}"}},
    }))
    (folder / "CRUSH.md").write_text("Be brief.\n")
    data = home / ".local" / "share" / "crush"
    data.mkdir(parents=True)
    (data / "crush.json").write_text(json.dumps({"providers": {"openai": {"api_key": REAL_KEY}}}))

    files, left_out = _copied("crush", home, project)

    assert left_out == ["~/.config/crush/crush.json: providers.corp.api_key",
                        "~/.config/crush/crush.json: providers.corp.extra_headers",
                        "~/.config/crush/crush.json: mcp.github.headers"]
    config = json.loads(files[".config/crush/crush.json"])
    assert config["providers"]["scripted"]["api_key"] == "$OPENAI_API_KEY"
    assert config["mcp"]["github"]["oauth_client_secret"] == "${GITHUB_MCP_SECRET}"
    assert files[".config/crush/CRUSH.md"] == b"Be brief.\n"
    assert not [target for target in files if target.startswith(".local/")], "Crush's data (its logins) stays"
    assert not [target for target, data in files.items() if REAL_KEY.encode() in data]


def test_a_crushrc_with_a_credential_stays_on_the_host_whole(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    folder = home / ".config" / "crush"
    folder.mkdir(parents=True)
    project.mkdir()
    (folder / "crushrc").write_text(
        "# models\n"
        'provider add deepseek --type openai-compat --base-url "https://api.deepseek.com/v1" \\\n'
        '  --api-key "$DEEPSEEK_API_KEY"\n'
        "permissions allow view edit\n"
        'mcp add github --type http --url "https://mcp.example.org" --header Authorization "Bearer $(op read x)"\n'
        f"export GITHUB_TOKEN={REAL_KEY}\n")

    files, left_out = _copied("crush", home, project)

    assert ".config/crush/crushrc" not in files
    assert left_out == ["~/.config/crush/crushrc: line 5: --header Authorization",
                        "~/.config/crush/crushrc: line 6: GITHUB_TOKEN"]


def test_a_crushrc_that_names_its_keys_by_variable_is_copied_as_it_is() -> None:
    script = (b'provider add deepseek --api-key "$DEEPSEEK_API_KEY" --base-url https://api.deepseek.com/v1\n'
              b"mcp add files --command node --args /srv/mcp.js --env API_TOKEN ${FILES_TOKEN}\n"
              b"option metrics false\nexport AWS_PROFILE=dev\n")
    assert crush_rc(script, frozenset()).data == script
    assert crush_rc(b"provider add corp --api-key sk-1\n", frozenset()).left_out == ("line 1: --api-key",)
    assert crush_rc(b"mcp add x --env API_TOKEN t-1\n", frozenset()).left_out == ("line 1: --env API_TOKEN",)
    assert crush_rc(b"export MY_VALUE=1\n", frozenset({"MY_VALUE"})).left_out == ("line 1: MY_VALUE",)
    assert crush_rc(b"\xff\xfe", frozenset()).data is None
