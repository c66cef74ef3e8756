"""The layer that installs a terminal agent: its package at the pinned version, the files of its
hooks where the agent reads them, and the environment that keeps it from updating itself."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.agents import PROFILES, SessionKind, profile_of
from opencode_sandbox.images.agent_layer import agent_dockerfile

TERMINAL_AGENTS = sorted(name for name, profile in PROFILES.items() if profile.session is SessionKind.TERMINAL)


@pytest.mark.parametrize("name", TERMINAL_AGENTS)
def test_the_layer_installs_the_pinned_package_its_hook_files_and_its_environment(name: str) -> None:
    profile = profile_of(name)
    dockerfile, context = agent_dockerfile("runner:base", profile, "9.8.7")
    assert f"{profile.package}@9.8.7" in dockerfile and f"&& {profile.command} --version" in dockerfile
    for path, content in profile.image_files:
        [copied] = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ") and
                    line.endswith(f" {path}")]
        assert context[copied] == content
    for variable, value in profile.environment:
        assert f"ENV {variable}={value}" in dockerfile.splitlines()


def test_each_new_agent_has_its_own_hook_file_or_none() -> None:
    assert [path for path, _ in profile_of("droid").image_files] == ["/etc/factory/settings.json"]
    assert [path for path, _ in profile_of("copilot").image_files] == [
        "/etc/github-copilot/policy.d/opencode-sandbox.json"]
    assert profile_of("cline").image_files == ()
