"""The agent's layer as a Dockerfile: a terminal agent's package at the pinned version (a user's own
agent's from npm or from its install script), the Debian packages it looks for before it, the files
of its hooks where the agent reads them, the environment that keeps it from updating itself, its
command checked, and nothing of a definition read as Dockerfile instructions."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.agents import PROFILES, AgentProfile, SessionKind, profile_of
from opencode_sandbox.core.agents.custom import parse_agents
from opencode_sandbox.images.agent_layer import INSTALL_SCRIPT, agent_dockerfile

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


def own(**fields: object) -> AgentProfile:
    [profile] = parse_agents({"mine": {"command": "mine", **fields}}, PROFILES)
    return profile


def test_an_own_agent_from_npm_is_pinned_and_its_command_checked_without_running_it() -> None:
    profile = own(package="@acme/mine-cli", title="Mine's \"CLI\"", environment={"MINE_NO_UPDATE": "1 2"})
    dockerfile, packaged = agent_dockerfile("runner:base", profile, "1.4.0")
    lines = dockerfile.splitlines()
    [install] = [line for line in lines if "npm install" in line]
    assert " @acme/mine-cli@1.4.0 && " in install and "--allow-scripts=@acme/mine-cli" in install
    assert install.endswith("command -v mine >/dev/null || { echo 'Mine'\"'\"'s \"CLI\"'\": the install gave no \"mine "
                            ">&2; exit 1; }; }")
    assert "ENV MINE_NO_UPDATE='1 2'" in lines
    assert "LABEL org.opencode-sandbox.agent=mine org.opencode-sandbox.agent-version=1.4.0" in lines
    assert INSTALL_SCRIPT not in packaged and lines[-1] == "USER dev"


def test_an_install_script_runs_from_a_file_of_the_build_context() -> None:
    script = "set -x\nprintf '#!/bin/sh\\necho mine\\n' > /usr/local/bin/mine\nchmod +x /usr/local/bin/mine\nFROM x"
    dockerfile, packaged = agent_dockerfile("runner:base", own(install=script), "ignored")
    assert packaged[INSTALL_SCRIPT] == script
    lines = dockerfile.splitlines()
    assert f"COPY {INSTALL_SCRIPT} /tmp/{INSTALL_SCRIPT}" in lines
    assert [line for line in lines if line.startswith("FROM")] == ["FROM runner:base"], "the script stays a script"
    assert "npm install" not in dockerfile and f"sh -e /tmp/{INSTALL_SCRIPT}" in dockerfile
    assert "LABEL org.opencode-sandbox.agent=mine org.opencode-sandbox.agent-version=''" in lines


def test_a_built_in_agent_still_proves_its_install_with_its_version() -> None:
    dockerfile, _ = agent_dockerfile("runner:base", PROFILES["codex"], "0.171.0")
    assert "@openai/codex@0.171.0 && npm cache clean --force && rm -rf /root/.npm /tmp/* && codex --version" \
        in dockerfile
