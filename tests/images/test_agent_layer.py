"""The layer that installs a terminal agent: its package at the pinned version, the Debian packages
it looks for before it, the files of its hooks where the agent reads them, and the environment that
keeps it from updating itself."""

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


def test_pis_layer_installs_fd_before_pi_and_its_extension_beside_it() -> None:
    dockerfile, packaged = agent_dockerfile("runner:1", profile_of("pi"), "0.73.1")
    [install] = [line for line in dockerfile.splitlines() if "npm install" in line]
    assert install.index("apt-get install -y --no-install-recommends fd-find") < install.index("npm install")
    assert " @mariozechner/pi-coding-agent@0.73.1 " in install
    assert install.endswith("pi --version")
    assert "COPY agent-file-1 /etc/opencode-sandbox/pi/activity.ts" in dockerfile
    assert packaged["agent-file-1"] == profile_of("pi").image_files[0][1]
    assert "ENV PI_SKIP_VERSION_CHECK=1" in dockerfile


def test_an_agent_that_needs_no_debian_package_runs_no_apt() -> None:
    for name in ("claude-code", "codex", "crush"):
        dockerfile, _ = agent_dockerfile("runner:1", profile_of(name), "1.0.0")
        assert "apt-get" not in dockerfile, name
        assert f"--allow-scripts={profile_of(name).package}" in dockerfile, "Crush's install script fetches its program"
