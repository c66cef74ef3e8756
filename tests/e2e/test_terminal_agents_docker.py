"""Claude Code and Codex, the real agents, in the sandbox on the docker runtime, on a real terminal.

Each agent talks to the scripted model over HTTPS through the egress proxy, which finds it by name
as it would the provider (the site, relay and CA of `test_agent_secret_docker.py`); its key is a
secret, so the VM holds a placeholder and the proxy puts the key into the requests to the model's
host. The agent edits the checkout through its own tool; while its turn is held back, the terminal
is closed, the VM is not stopped and the session keeps running; two new terminals attach to the
same session; once the turn ends, the user is signalled once, and when the last terminal closes,
the VM stops.
"""

from __future__ import annotations

import json
import shlex
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from tests.e2e.harness import Project, Tmux, docker, wait_until
from tests.e2e.test_agent_secret_docker import (  # noqa: F401 (fixtures)
    Recorder,
    Site,
    recorder,
    serve_proxy,
    site,
    start_relay,
)
from tests.e2e.test_network_policy_docker import proxy_images_removed_after  # noqa: F401 (a fixture)
from tests.fixtures.agents import CLAUDE_CODE_VERSION, CODEX_VERSION
from tests.fixtures.images import RunnerBase
from tests.fixtures.model_server import MODEL_ID, ModelServer, Reply, ToolCall, step

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

KEY = "sk-real-terminal-agent-5e7a9c1b3d"
NOTE = "agent-note.txt"
NOTE_TEXT = "written by the agent in its terminal session\n"
PROMPT = "Write the note file"
DONE = "The note is written"


@dataclass(frozen=True)
class AgentCase:
    name: str
    version: str
    variable: str
    secret: str
    """The `secrets` entry for the variable, sent to the model's host."""
    ready: str
    """What the agent's interface shows once it takes a prompt."""
    write_note: ToolCall
    configure: Callable[[Path, str], None]
    """Writes the user's own configuration of the agent (their home, the model's URL)."""
    keys_sent: Callable[[ModelServer], list[str]]


def configure_claude_code(home: Path, model_host: str) -> None:
    folder = home / ".claude"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps({
        "env": {"ANTHROPIC_BASE_URL": f"https://{model_host}", "ANTHROPIC_MODEL": MODEL_ID,
                "ANTHROPIC_SMALL_FAST_MODEL": MODEL_ID, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        "permissions": {"defaultMode": "acceptEdits"},
    }))


def configure_codex(home: Path, model_host: str) -> None:
    folder = home / ".codex"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        f'model = "{MODEL_ID}"\nmodel_provider = "scripted"\napproval_policy = "never"\n'
        'check_for_update_on_startup = false\n\n'
        f'[model_providers.scripted]\nname = "Scripted"\nbase_url = "https://{model_host}/v1"\n'
        'env_key = "OPENAI_API_KEY"\nwire_api = "responses"\n\n'
        '[projects."/workspace"]\ntrust_level = "trusted"\n')


CASES = {
    "claude-code": AgentCase(
        "claude-code", CLAUDE_CODE_VERSION, "ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY[x-api-key]={host}",
        r"\? for shortcuts|bypass permissions|accept edits",
        ToolCall("Write", {"file_path": f"/workspace/{NOTE}", "content": NOTE_TEXT}),
        configure_claude_code, lambda model: [key for key in model.api_keys if key]),
    "codex": AgentCase(
        "codex", CODEX_VERSION, "OPENAI_API_KEY", "OPENAI_API_KEY={host}",
        r"OpenAI Codex|To get started|send",
        ToolCall("exec_command", {"cmd": f"printf '%s\\n' '{NOTE_TEXT.strip()}' > {NOTE}", "workdir": "/workspace"}),
        configure_codex, lambda model: [value.removeprefix("Bearer ") for value in model.authorizations if value]),
}

CLAUDE_STATE = """const fs = require('fs');
const key = process.env.ANTHROPIC_API_KEY || '';
fs.writeFileSync(process.env.HOME + '/.claude.json', JSON.stringify({
  hasCompletedOnboarding: true, customApiKeyResponses: {approved: [key.slice(-20)], rejected: []},
  projects: {'/workspace': {hasTrustDialogAccepted: true}}}));"""
"""What Claude Code keeps of a first run it finished: the user answered its onboarding and its questions
about the key (the placeholder, as the VM has it) and about trusting the checkout."""


def session_running(project: Project) -> bool:
    return docker("exec", "--user", "dev", project.vm, "tmux", "has-session", "-t", "agent").returncode == 0


def in_vm(project: Project, script: str, user: str = "dev") -> str:
    result = docker("exec", "--user", user, project.vm, "sh", "-c", script)
    return result.stdout + result.stderr


def assert_the_vm_holds_only_the_placeholder(project: Project, variable: str) -> None:
    placeholder = in_vm(project, f"printenv {variable}").strip()
    assert placeholder and placeholder != KEY, placeholder
    for user, folders in (("dev", "/home/dev /workspace"), ("root", "/etc /tmp")):
        found = in_vm(project, f"grep -rlF -- {shlex.quote(KEY)} {folders} 2>/dev/null; true", user)
        assert not found.strip(), f"the key in the VM's files: {found}"
    processes = in_vm(project, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'", "root")
    assert KEY not in processes


@pytest.mark.parametrize("agent", sorted(CASES))
def test_a_terminal_agent_works_in_a_session_that_outlives_the_terminal(
    agent: str, any_user_project: Project, site: Site, recorder: Recorder,  # noqa: F811
    tmp_path: Path, unique: str, runner_base_image: RunnerBase,
    proxy_images_removed_after: None,  # noqa: F811
) -> None:
    case = CASES[agent]
    project = any_user_project
    home = project.user_home
    ca = trustme.CA()
    ca_file = home / "model-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(site.model_name, site.other_name).configure_cert(tls)
    steps = [step(case.write_note), step(Reply(DONE), held=True)]
    with ModelServer.start(steps, bind=site.gateway, advertised_host=site.gateway, tls=tls) as model:
        start_relay(site, urlsplit(model.url).port or 0, recorder.port, runner_base_image.result.reference)
        case.configure(home, site.model_name)
        project.env.update({
            "OPENCODE_SANDBOX_AGENT": agent,
            "OPENCODE_SANDBOX_SECRETS": case.secret.format(host=site.model_name),
            case.variable: KEY,
            "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
            "OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT": "2s",
        })
        if project.user:
            project.user.give(home)
        built = project.cli("build", "--agent-version", case.version, timeout=1200)
        assert built.returncode == 0, built.stdout + built.stderr
        assert f"{agent} {case.version}" in built.stdout, built.stdout
        # The VM and its proxy, started before the first terminal, as a first `shell` would.
        seeded = project.cli("shell", "--", "node", "-e", CLAUDE_STATE if agent == "claude-code" else "")
        assert seeded.returncode == 0, seeded.stderr
        serve_proxy(project, site)

        terminals: list[Tmux] = []
        try:
            first = Tmux(f"osb-{agent}-1-{unique}", project.terminal_command(), project.root, project.env)
            terminals.append(first)
            first.wait_for(case.ready, timeout=300)
            first.send(PROMPT)
            first.wait_for(PROMPT, timeout=30)  # typed, then sent: keys that come at once are a paste to Codex
            first.send("Enter")
            assert steps[1].reached.wait(240), (
                f"the agent never came back for its next step: {model.requests[-3:]}\n{first.screen()}")
            assert (project.root / NOTE).read_text() == NOTE_TEXT, "the agent's own tool wrote the checkout"
            sent = case.keys_sent(model)
            assert sent and set(sent) == {KEY}, "the key reaches the model only as the secret's value"
            assert_the_vm_holds_only_the_placeholder(project, case.variable)
            assert in_vm(project, "cat ~/.local/state/opencode-sandbox/agent-activity").startswith("busy "), \
                "the agent's hooks recorded its turn"

            # The terminal closes in the middle of the turn: the agent goes on, and the VM is not stopped.
            first.close()
            terminals.remove(first)
            assert wait_until(lambda: "holding" in project.reaper_log(), 60), project.reaper_log()
            assert project.vm_running() and session_running(project), project.reaper_log()
            assert "sessions still working" in project.reaper_log()

            # Two terminals attach to the same session: the conversation is there.
            for number in (2, 3):
                terminal = Tmux(f"osb-{agent}-{number}-{unique}", project.terminal_command(), project.root,
                                project.env)
                terminals.append(terminal)
                terminal.wait_for(PROMPT, timeout=120)
            steps[1].release.set()
            for terminal in terminals:
                terminal.wait_for(DONE, timeout=120)

            # The turn's end is signalled once: no desktop here, so one attached client rings its bell.
            layout_folder = project.state_dir
            assert wait_until(lambda: (layout_folder / "attention").exists(), 60), project.reaper_log()
            event = (layout_folder / "attention").read_text().strip()
            rung = layout_folder / "attention.rung"
            assert wait_until(lambda: rung.exists() and rung.read_text().strip() == event, 30), (
                "\n".join(terminal.screen() for terminal in terminals) + project.reaper_log())
            assert project.reaper_log().count("finished its turn") == 1, project.reaper_log()
            assert project.vm_running(), "a client is attached"
        finally:
            steps[1].release.set()
            for terminal in terminals:
                terminal.close()

        # The last terminal closed and the agent waits for the user: the VM stops.
        assert wait_until(project.vm_stopped, 90), project.reaper_log()
        assert "all sessions are quiet" in project.reaper_log(), project.reaper_log()
