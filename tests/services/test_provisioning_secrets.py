"""The copy of opencode's logins the VM gets: without the API keys that are secrets."""

from __future__ import annotations

import json
from pathlib import Path

from opencode_sandbox.core.providers import providers_kept_out, without_kept_out_keys
from opencode_sandbox.services import provisioning
from opencode_sandbox.services.provisioning import AUTH_TARGET, Content, without_secret_keys

LOGINS = {"openai": {"type": "api", "key": "sk-1"}, "anthropic": {"type": "oauth", "refresh": "r"},
          "mistral": {"type": "api", "key": "m-1"}}


def files_with(tmp_path: Path, text: str) -> dict[str, Path]:
    path = tmp_path / "auth.json"
    path.write_text(text)
    path.chmod(0o600)
    return {AUTH_TARGET: path, ".config/opencode/opencode.json": path}


def test_only_the_api_keys_of_providers_with_a_secret_are_left_out(tmp_path: Path) -> None:
    files = files_with(tmp_path, json.dumps(LOGINS))
    filtered = without_secret_keys(files, {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "UNRELATED"})
    content = filtered[AUTH_TARGET]
    assert isinstance(content, Content) and content.mode == 0o600
    assert json.loads(content.data) == {"anthropic": {"type": "oauth", "refresh": "r"},
                                        "mistral": {"type": "api", "key": "m-1"}}
    assert filtered[".config/opencode/opencode.json"] == files[".config/opencode/opencode.json"]
    assert provisioning.manifest(filtered)[AUTH_TARGET] != provisioning.manifest(files)[AUTH_TARGET]


def test_without_secrets_or_with_nothing_to_leave_out_the_file_is_copied_as_it_is(tmp_path: Path) -> None:
    files = files_with(tmp_path, json.dumps(LOGINS))
    assert without_secret_keys(files, set()) == files
    assert without_secret_keys(files, {"GROQ_API_KEY"}) == files
    broken = files_with(tmp_path, "{not json")
    assert without_secret_keys(broken, {"OPENAI_API_KEY"}) == broken


def test_every_key_left_out_still_replaces_the_vm_s_copy(tmp_path: Path) -> None:
    files = files_with(tmp_path, json.dumps({"openai": {"type": "api", "key": "sk-1"}}))
    content = without_secret_keys(files, {"OPENAI_API_KEY"})[AUTH_TARGET]
    assert isinstance(content, Content) and json.loads(content.data) == {}


def test_the_provider_table_decides_which_logins_are_secrets() -> None:
    assert providers_kept_out({"OPENAI_API_KEY", "XAI_API_KEY", "SOMETHING"}) == {"openai", "xai"}
    assert without_kept_out_keys(LOGINS, set()) is LOGINS
    assert without_kept_out_keys(["not", "a", "mapping"], {"OPENAI_API_KEY"}) == ["not", "a", "mapping"]
