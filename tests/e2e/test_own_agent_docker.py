"""An agent of the user's own, defined only in their configuration (`agents`), on the docker runtime,
on a real terminal, as root and as uid 1001: Grok CLI (`@vibe-kit/grok-cli`), a real agent from npm
that no profile knows. The first start builds its layer at the pinned version; its interface renders
with its key as a secret (the VM holds a placeholder); the user's configuration folder is copied; the
session outlives the terminal, and a second terminal attaches to it.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from opencode_sandbox.core.naming import LABEL_AGENT, LABEL_AGENT_VERSION
from opencode_sandbox.images.updater import record_baked_agent_version
from tests.e2e.harness import Project, Tmux, docker, wait_until
from tests.e2e.test_network_policy_docker import proxy_images_removed_after  # noqa: F401 (a fixture)
from tests.fixtures.images import RunnerBase

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

NAME = "grok-of-mine"
PACKAGE = "@vibe-kit/grok-cli"
VERSION = "0.0.34"
KEY = "xai-own-agent-key-8c2f71d04b"
READY = "Ask me anything"
CONFIG = f"""\
agents:
  {NAME}:
    title: Grok CLI
    package: "{PACKAGE}"
    command: grok
    credentials:
      - {{variable: GROK_API_KEY, hosts: [api.x.ai], headers: [authorization]}}
    config: [.grok/user-settings.json]
    environment: {{GROK_MODEL: grok-code-fast-1}}
"""
SETTINGS = {"defaultModel": "grok-4-latest"}
"""Not Grok CLI's default: the agent adds its defaults to the copied file as it starts, and keeps this."""


def test_an_agent_of_the_users_own_renders_in_a_session_that_outlives_the_terminal(
    any_user_project: Project, unique: str, runner_base_image: RunnerBase,
    proxy_images_removed_after: None,  # noqa: F811
) -> None:
    project = any_user_project
    config = project.paths.config_dir / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG)
    grok = project.user_home / ".grok"
    grok.mkdir(parents=True, exist_ok=True)
    (grok / "user-settings.json").write_text(json.dumps(SETTINGS))
    project.env["GROK_API_KEY"] = KEY
    # The version a first build would have found on npm: the first start builds the layer with it.
    record_baked_agent_version(project.paths.state_dir, NAME, VERSION, package=PACKAGE)
    if project.user and project.home:
        project.user.give(project.home)

    def in_vm(script: str, user: str = "dev") -> str:
        result = docker("exec", "--user", user, project.vm, "sh", "-c", script)
        return result.stdout + result.stderr

    def session_running() -> bool:
        return in_vm("tmux has-session -t agent && echo running").strip().endswith("running")

    built = project.cli("shell", "--agent", NAME, "--", "grok", "--version", timeout=3600)
    assert built.returncode == 0 and built.stdout.strip(), built.stdout + built.stderr
    installed = json.loads(in_vm(f'cat "$(npm root -g)/{PACKAGE}/package.json"'))
    assert installed["version"] == VERSION, "the version the state pinned"
    image = docker("inspect", "--format", "{{.Config.Image}}", project.vm, check=True).stdout.strip()
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image, check=True).stdout)
    assert (labels[LABEL_AGENT], labels[LABEL_AGENT_VERSION]) == (NAME, VERSION), image
    assert in_vm("printenv GROK_MODEL").strip() == "grok-code-fast-1"

    first = Tmux(f"osb-own-1-{unique}", project.terminal_command("--agent", NAME), project.root, project.env)
    try:
        first.wait_for(READY, timeout=300)
        placeholder = in_vm("printenv GROK_API_KEY").strip()
        assert placeholder and KEY not in placeholder, placeholder
        found = in_vm(f"grep -rlF -- {shlex.quote(KEY)} /home/dev /workspace 2>/dev/null; true")
        assert not found.strip(), f"the key in the VM's files: {found}"
        copied = json.loads(in_vm("cat ~/.grok/user-settings.json"))
        assert SETTINGS.items() <= copied.items(), f"the user's configuration copied: {copied}"
    finally:
        first.close()

    # The terminal closed: the agent's session goes on in the VM.
    time.sleep(5)
    assert project.vm_running() and session_running(), project.reaper_log()
    assert "grok" in in_vm("ps -eo args")
    listed = project.cli("list", "--format", "json")
    [row] = [row for row in json.loads(listed.stdout)["result"] if row["name"] == project.vm]
    assert (row["agent"], row["session_running"]) == (NAME, True), listed.stdout

    # A new terminal attaches to the same session, and what it types reaches the agent.
    second = Tmux(f"osb-own-2-{unique}", project.terminal_command("--agent", NAME), project.root, project.env)
    try:
        second.wait_for(READY, timeout=300)
        second.send("typed in the second terminal")
        second.wait_for("typed in the second terminal", timeout=60)
        pane = in_vm("tmux capture-pane -p -t agent")
        assert "typed in the second terminal" in pane, pane
    finally:
        second.close()
    assert wait_until(session_running, 10), "the session outlives the second terminal too"
