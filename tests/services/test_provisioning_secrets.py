"""The copy of opencode's logins the VM gets: without the API keys that are secrets."""

from __future__ import annotations

import json

from opencode_sandbox.core.providers import providers_kept_out, without_kept_out_keys
from opencode_sandbox.services import provisioning
from opencode_sandbox.services.provisioning import AUTH_TARGET, Content, without_secret_keys

LOGINS = {"openai": {"type": "api", "key": "sk-1"}, "anthropic": {"type": "oauth", "refresh": "r"},
          "mistral": {"type": "api", "key": "m-1"}}


def files_with(text: str) -> dict[str, Content]:
    content = Content(text.encode(), 0o600, 1_700_000_000)
    return {AUTH_TARGET: content, ".config/opencode/opencode.json": content}


def test_only_the_api_keys_of_providers_with_a_secret_are_left_out() -> None:
    files = files_with(json.dumps(LOGINS))
    filtered = without_secret_keys(files, {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "UNRELATED"})
    content = filtered[AUTH_TARGET]
    assert isinstance(content, Content) and content.mode == 0o600
    assert json.loads(content.data) == {"anthropic": {"type": "oauth", "refresh": "r"},
                                        "mistral": {"type": "api", "key": "m-1"}}
    assert filtered[".config/opencode/opencode.json"] == files[".config/opencode/opencode.json"]
    assert provisioning.manifest(filtered)[AUTH_TARGET] != provisioning.manifest(files)[AUTH_TARGET]


def test_without_secrets_or_with_nothing_to_leave_out_the_file_is_copied_as_it_is() -> None:
    files = files_with(json.dumps(LOGINS))
    assert without_secret_keys(files, set()) == files
    assert without_secret_keys(files, {"GROQ_API_KEY"}) == files
    broken = files_with("{not json")
    assert without_secret_keys(broken, {"OPENAI_API_KEY"}) == broken


def test_every_key_left_out_still_replaces_the_vm_s_copy() -> None:
    files = files_with(json.dumps({"openai": {"type": "api", "key": "sk-1"}}))
    content = without_secret_keys(files, {"OPENAI_API_KEY"})[AUTH_TARGET]
    assert isinstance(content, Content) and json.loads(content.data) == {}


def test_the_provider_table_decides_which_logins_are_secrets() -> None:
    assert providers_kept_out({"OPENAI_API_KEY", "XAI_API_KEY", "SOMETHING"}) == {"openai", "xai"}
    assert without_kept_out_keys(LOGINS, set()) is LOGINS
    assert without_kept_out_keys(["not", "a", "mapping"], {"OPENAI_API_KEY"}) == ["not", "a", "mapping"]
