"""The agent's layer as a Dockerfile: a user's own agent from npm or from its install script, its
command checked, its environment set, and nothing of its definition read as Dockerfile instructions."""

from __future__ import annotations

from opencode_sandbox.core.agents import PROFILES, AgentProfile
from opencode_sandbox.core.agents.custom import parse_agents
from opencode_sandbox.images.agent_layer import INSTALL_SCRIPT, agent_dockerfile


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
