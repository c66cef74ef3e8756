"""The scenario of a terminal agent (Claude Code, Codex, Gemini CLI, Qwen Code, pi, Crush) in the
sandbox, on a real terminal, the same on both runtimes: the agent edits the checkout through the
scripted model with its key as a secret; while its turn is held back the terminal closes, the VM is
not stopped and the session runs on; two new terminals attach to it; the turn's end is signalled
once; and once the last terminal has closed and the agent waits, the VM stops.

A runtime's test module gives the project, the model server (reached by the VM as the provider would
be, over HTTPS under a CA of the test's own) and how to run a command in the VM.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opencode_sandbox.core.agent_activity import parse_report
from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.core.agents.profile import ACTIVITY_FILE, ActivitySource
from opencode_sandbox.core.terminal_activity import ECHO_S, printing
from opencode_sandbox.guest.terminal_session import report_script
from opencode_sandbox.images.updater import record_baked_agent_version
from opencode_sandbox.services.attention import WATCH_INTERVAL_S
from tests.e2e.harness import Project, Tmux, wait_until
from tests.fixtures.agents import (
    CLAUDE_CODE_VERSION,
    CLINE_VERSION,
    CODEX_VERSION,
    CRUSH_VERSION,
    GEMINI_VERSION,
    PI_VERSION,
    QWEN_CODE_VERSION,
)
from tests.fixtures.model_server import MODEL_ID, PROVIDER_ID, ModelServer, Reply, Step, ToolCall, step

InVm = Callable[[str, str], str]
"""Runs a shell script in the project's VM as a user (`dev`, `root`); its output."""

KEY = "sk-real-terminal-agent-5e7a9c1b3d"
NOTE = "agent-note.txt"
NOTE_TEXT = "written by the agent in its terminal session\n"
PROMPT = "Write the note file"
DONE = "The note is written"
TMUX_ADVICE = re.compile(r"extended-keys|focus-events|tmux\.conf")
"""What an agent prints when the session's tmux lacks what it needs (pi: modified Enter keys)."""


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
    instructions: str
    """The file of the user's home with their instructions to the agent, which a start copies."""


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


def configure_gemini(home: Path, model_host: str) -> None:
    """A returning user's Gemini CLI: the key's sign-in chosen, edits accepted, and the endpoint and
    model in its `.env`, as Gemini CLI reads them."""
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"defaultApprovalMode": "auto_edit"},
    }))
    (folder / ".env").write_text(f"GOOGLE_GEMINI_BASE_URL=https://{model_host}\nGEMINI_MODEL={MODEL_ID}\n")


def configure_qwen_code(home: Path, model_host: str) -> None:
    """A returning user's Qwen Code: an OpenAI-compatible provider at the model's URL, edits
    accepted, no suggestions of the next prompt (each one a request of its own)."""
    folder = home / ".qwen"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps({
        "env": {"OPENAI_BASE_URL": f"https://{model_host}/v1"},
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": MODEL_ID},
        "tools": {"approvalMode": "auto-edit"},
        "ui": {"enableFollowupSuggestions": False},
    }))


def bearer_keys(model: ModelServer) -> list[str]:
    return [value.removeprefix("Bearer ") for value in model.authorizations if value]


def configure_pi(home: Path, model_host: str) -> None:
    """A provider of the user's own in `models.json`, its key named by variable, as pi's default."""
    folder = home / ".pi" / "agent"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.json").write_text(json.dumps({"providers": {PROVIDER_ID: {
        "baseUrl": f"https://{model_host}/v1", "api": "openai-completions", "apiKey": "OPENAI_API_KEY",
        "models": [{"id": MODEL_ID, "name": "Scripted model"}]}}}))
    (folder / "settings.json").write_text(json.dumps({"defaultProvider": PROVIDER_ID, "defaultModel": MODEL_ID}))


def configure_crush(home: Path, model_host: str) -> None:
    """A provider of the user's own in `crush.json`, its key taken from the environment, as Crush's
    models; the tools that change files allowed without asking, as a user who trusts the VM sets."""
    folder = home / ".config" / "crush"
    folder.mkdir(parents=True, exist_ok=True)
    chosen = {"provider": PROVIDER_ID, "model": MODEL_ID}
    (folder / "crush.json").write_text(json.dumps({
        "providers": {PROVIDER_ID: {
            "name": "Scripted", "type": "openai-compat", "base_url": f"https://{model_host}/v1",
            "api_key": "$OPENAI_API_KEY",
            "models": [{"id": MODEL_ID, "name": "Scripted model", "context_window": 128000,
                        "default_max_tokens": 4096}]}},
        "models": {"large": chosen, "small": chosen},
        "permissions": {"allowed_tools": ["view", "ls", "write", "edit", "bash"]},
    }))


def configure_cline(home: Path, model_host: str) -> None:
    """An OpenAI-compatible provider with a base URL, as `cline auth --provider openai` writes it (Cline
    replaces an entry without its `updatedAt` and `tokenSource` with its own default), its key left to
    `OPENAI_API_KEY`; and a folder of rules."""
    settings = home / ".cline" / "data" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "providers.json").write_text(json.dumps({
        "version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
        "providers": {"openai-compatible": {
            "settings": {"provider": "openai-compatible", "model": MODEL_ID, "baseUrl": f"https://{model_host}/v1"},
            "updatedAt": "2026-12-01T00:00:00.000Z", "tokenSource": "manual"}},
    }))
    (home / ".cline" / "rules").mkdir(parents=True, exist_ok=True)


CASES = {
    "claude-code": AgentCase(
        "claude-code", CLAUDE_CODE_VERSION, "ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY[x-api-key]={host}",
        r"\? for shortcuts|bypass permissions|accept edits",
        ToolCall("Write", {"file_path": f"/workspace/{NOTE}", "content": NOTE_TEXT}),
        configure_claude_code, lambda model: [key for key in model.api_keys if key], ".claude/CLAUDE.md"),
    "codex": AgentCase(
        "codex", CODEX_VERSION, "OPENAI_API_KEY", "OPENAI_API_KEY={host}",
        r"OpenAI Codex|To get started|for shortcuts|send",
        ToolCall("exec_command", {"cmd": f"printf '%s\\n' '{NOTE_TEXT.strip()}' > {NOTE}", "workdir": "/workspace"}),
        configure_codex, bearer_keys, ".codex/AGENTS.md"),
    "gemini": AgentCase(
        "gemini", GEMINI_VERSION, "GEMINI_API_KEY", "GEMINI_API_KEY[x-goog-api-key]={host}",
        r"Type your message",
        ToolCall("write_file", {"file_path": f"/workspace/{NOTE}", "content": NOTE_TEXT}),
        configure_gemini, lambda model: [key for key in model.google_keys if key], ".gemini/GEMINI.md"),
    "qwen-code": AgentCase(
        "qwen-code", QWEN_CODE_VERSION, "OPENAI_API_KEY", "OPENAI_API_KEY={host}",
        r"Type your message",
        ToolCall("write_file", {"file_path": f"/workspace/{NOTE}", "content": NOTE_TEXT}),
        configure_qwen_code, bearer_keys, ".qwen/QWEN.md"),
    "pi": AgentCase(
        "pi", PI_VERSION, "OPENAI_API_KEY", "OPENAI_API_KEY={host}", r"pi v\d+\.\d+",
        ToolCall("write", {"path": f"/workspace/{NOTE}", "content": NOTE_TEXT}),
        configure_pi, bearer_keys, ".pi/agent/AGENTS.md"),
    "crush": AgentCase(
        "crush", CRUSH_VERSION, "OPENAI_API_KEY", "OPENAI_API_KEY={host}", r"Scripted model",
        ToolCall("write", {"file_path": f"/workspace/{NOTE}", "content": NOTE_TEXT}),
        configure_crush, bearer_keys, ".config/crush/CRUSH.md"),
    "cline": AgentCase(
        "cline", CLINE_VERSION, "OPENAI_API_KEY", "OPENAI_API_KEY={host}",
        r"What can I do for you|Ask anything",
        ToolCall("run_commands", {"commands": [f"printf '%s\\n' '{NOTE_TEXT.strip()}' > /workspace/{NOTE}"]}),
        configure_cline, bearer_keys, ".cline/rules/notes.md"),
}

CLAUDE_STATE = """const fs = require('fs');
const key = process.env.ANTHROPIC_API_KEY || '';
fs.writeFileSync(process.env.HOME + '/.claude.json', JSON.stringify({
  hasCompletedOnboarding: true, customApiKeyResponses: {approved: [key.slice(-20)], rejected: []},
  projects: {'/workspace': {hasTrustDialogAccepted: true}}}));"""
"""What Claude Code keeps of a first run it finished: the user answered its onboarding and its questions
about the key (the placeholder, as the VM has it) and about trusting the checkout."""


CRUSH_RELEASES = "https://github.com/charmbracelet/crush/releases"
"""Where the install script of Crush's npm package downloads the program from, checking it against
the digest the package names."""
NPM_REGISTRY = "https://registry.npmjs.org"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def cannot_install(name: str, version: str) -> str | None:
    """Why the agent's image cannot be built from this host, None when it can: Crush's program
    comes from GitHub, not from npm; Factory Droid's from a package of npm's for each platform, at
    the same version, which a registry may lack."""
    if name == "crush":
        try:
            with urllib.request.urlopen(urllib.request.Request(CRUSH_RELEASES, method="HEAD"), timeout=10):
                return None
        except OSError:
            return f"Crush's npm package downloads its program from {CRUSH_RELEASES}, which this host cannot reach"
    if name == "droid":
        platform_package = f"@factory/cli-linux-{'arm64' if os.uname().machine == 'aarch64' else 'x64'}"
        try:
            with urllib.request.urlopen(f"{NPM_REGISTRY}/{platform_package.replace('/', '%2f')}", timeout=10) as answer:
                versions = json.load(answer).get("versions", {})
        except (OSError, ValueError):
            return f"npm's registry did not answer for {platform_package}"
        if version not in versions:
            return (f"npm's registry has no {platform_package} {version}, the program of @factory/cli {version} "
                    f"(it has {', '.join(sorted(versions, key=_release)[-3:]) or 'none'})")
    return None


def assert_the_vm_holds_only_the_placeholder(in_vm: InVm, variable: str) -> None:
    placeholder = in_vm(f"printenv {variable}", "dev").strip()
    assert placeholder and placeholder != KEY, placeholder
    for user, folders in (("dev", "/home/dev /workspace"), ("root", "/etc /tmp")):
        found = in_vm(f"grep -rlF -- {shlex.quote(KEY)} {folders} 2>/dev/null; true", user)
        assert not found.strip(), f"the key in the VM's files: {found}"
    processes = in_vm("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'", "root")
    assert KEY not in processes



def assert_the_vm_reports_a_turn(in_vm: InVm, case: AgentCase) -> None:
    """In the middle of a turn: the agent's hooks recorded it, or, for an agent without hooks, its
    terminal printed within the window that tells a working agent."""
    if profile_of(case.name).activity is ActivitySource.HOOKS:
        assert in_vm(f"cat ~/{ACTIVITY_FILE}", "dev").startswith("busy "), "the agent's hooks recorded its turn"
        return
    report = parse_report(in_vm(report_script(), "dev"))
    assert printing(report), f"the agent's terminal prints while its turn runs: {report}"


def printed_on_its_own_s(in_vm: InVm) -> int:
    """How long the session has printed since the last key or attach, as the VM reports it."""
    report = parse_report(in_vm(report_script(), "dev"))
    if not printing(report) or report.keys_s is None or report.quiet_s is None:
        return 0
    return report.keys_s - report.quiet_s


def agent_steps(case: AgentCase) -> list[Step]:
    """The script: the agent's tool call that writes the note, then its final answer, held back."""
    return [step(case.write_note), step(Reply(DONE), held=True)]


def configure(project: Project, case: AgentCase, model_host: str, ca_file: Path) -> None:
    """The user's configuration of the agent and its key as a secret for the model's host; then the
    agent's image at its pinned version and the VM, as a first `shell` makes them, left running
    (the scenario's own starts have a short idle timeout). The layer's own build is tested in
    `tests/images/test_builder_docker.py`."""
    home = project.user_home
    case.configure(home, model_host)
    project.env.update({
        "OPENCODE_SANDBOX_AGENT": case.name,
        "OPENCODE_SANDBOX_SECRETS": case.secret.format(host=model_host),
        case.variable: KEY,
        "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
        "OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT": "1h",
    })
    # The agent's version as a first build would have recorded it: the first start builds its layer.
    record_baked_agent_version(project.paths.state_dir, case.name, case.version)
    if case.name == "crush":
        # Crush's answer to its offer to write the checkout's instructions, kept in the checkout.
        (project.root / ".crush").mkdir(exist_ok=True)
        (project.root / ".crush" / "init").write_text("")
        if project.user:
            project.user.give(project.root / ".crush")
    if project.user and project.home:
        project.user.give(project.home)
    seeded = project.cli("shell", "--", "node", "-e", CLAUDE_STATE if case.name == "claude-code" else "",
                         timeout=3600)
    assert seeded.returncode == 0, seeded.stderr


def run_scenario(project: Project, case: AgentCase, model: ModelServer, steps: list[Step], in_vm: InVm,
                 unique: str, slow: float = 1.0) -> str:
    """The scenario on a configured project (`configure`); `slow` scales every wait. The reaper's
    log at the end, for the runtime's test to read what it decided."""

    def session_running() -> bool:
        return in_vm("tmux has-session -t agent && echo running", "dev").strip().endswith("running")

    log = project.user_home / f"run-{unique}.log"

    def logged_run() -> list[str]:
        """`run`, its log (verbose) in `log`; the terminal shows the agent alone."""
        return ["sh", "-c", '"$@" 2>>"$0"', str(log), *project.terminal_command("--log-level", "verbose")]

    def early_starts() -> tuple[int, int]:
        text = log.read_text()
        return text.count("while the start checks"), text.count("started early, unless a client watches it")

    # The VM runs and no session does: the agent starts at once, while the start checks, and that
    # start changes nothing, so the session the terminal attaches to is the one started early.
    warm = Tmux(f"osb-{case.name}-0-{unique}", logged_run(), project.root, project.env)
    try:
        warm.wait_for(case.ready, timeout=300 * slow)
        assert early_starts() == (1, 0), log.read_text()
    finally:
        warm.close()
    in_vm("tmux kill-session -t agent", "dev")  # the user quits the agent

    # The user's instructions to the agent changed: the start copies them after the agent started
    # early, so it ends that session, and the terminal gets one started after the copy.
    instructions = project.user_home / case.instructions
    instructions.write_text("Keep notes short.\n")
    project.env["OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT"] = "2s"
    terminals: list[Tmux] = []
    try:
        first = Tmux(f"osb-{case.name}-1-{unique}", logged_run(), project.root, project.env)
        terminals.append(first)
        first.wait_for(case.ready, timeout=300 * slow)
        assert early_starts() == (2, 1), log.read_text()
        assert in_vm(f"cat ~/{case.instructions}", "dev") == "Keep notes short.\n"
        first.send(PROMPT)
        first.wait_for(PROMPT, timeout=30 * slow)  # typed, then sent: keys that come at once are a paste to Codex
        first.send("Enter")
        assert steps[1].reached.wait(240 * slow), (
            f"the agent never came back for its next step: {model.requests[-3:]}\n{first.screen()}")
        if project.env.get("OPENCODE_SANDBOX_WORKSPACE") == "isolated":
            assert not (project.root / NOTE).exists(), "the agent's edit reached the checkout before apply"
            applied = project.cli("apply")
            assert applied.returncode == 0, applied.stdout + applied.stderr
        assert (project.root / NOTE).read_text() == NOTE_TEXT, "the agent's own tool wrote the checkout"
        sent = case.keys_sent(model)
        assert sent and set(sent) == {KEY}, "the key reaches the model only as the secret's value"
        assert_the_vm_holds_only_the_placeholder(in_vm, case.variable)
        assert_the_vm_reports_a_turn(in_vm, case)
        assert not TMUX_ADVICE.search(first.screen()), f"the agent asks for another tmux set-up:\n{first.screen()}"

        # The terminal closes in the middle of the turn: the agent goes on, and the VM is not stopped.
        first.close()
        terminals.remove(first)
        assert wait_until(lambda: "holding" in project.reaper_log(), 60 * slow), project.reaper_log()
        assert project.vm_running() and session_running(), project.reaper_log()
        assert "sessions still working" in project.reaper_log()
        if profile_of(case.name).activity is ActivitySource.TERMINAL:
            # Its terminal tells a turn from looks seconds apart: the turn prints on its own a few looks'
            # time before another terminal attaches (and draws the screen again).
            assert wait_until(lambda: printed_on_its_own_s(in_vm) > ECHO_S + 3 * WATCH_INTERVAL_S, 60 * slow)

        # Two terminals attach to the same session: the conversation is there.
        for number in (2, 3):
            terminal = Tmux(f"osb-{case.name}-{number}-{unique}", project.terminal_command(), project.root,
                            project.env)
            terminals.append(terminal)
            terminal.wait_for(PROMPT, timeout=120 * slow)
        steps[1].release.set()
        for terminal in terminals:
            terminal.wait_for(DONE, timeout=120 * slow)

        # The turn's end is signalled once: no desktop here, so one attached client rings its bell.
        attention, rung = project.state_dir / "attention", project.state_dir / "attention.rung"
        assert wait_until(attention.exists, 60 * slow), project.reaper_log()
        event = attention.read_text().strip()
        assert wait_until(lambda: rung.exists() and rung.read_text().strip() == event, 30 * slow), (
            "\n".join(terminal.screen() for terminal in terminals) + project.reaper_log())
        assert project.reaper_log().count("finished its turn") == 1, project.reaper_log()
        assert project.vm_running(), "a client is attached"
    finally:
        steps[1].release.set()
        for terminal in terminals:
            terminal.close()

    # The last terminal closed and the agent waits for the user: the VM stops.
    assert wait_until(project.vm_stopped, 90 * slow), project.why_still_running()
    assert "all sessions are quiet" in project.reaper_log(), project.reaper_log()
    return project.reaper_log(characters=20000)


def assert_the_outcome(project: Project, reaper_log: str) -> None:
    """What the user finds afterwards: the agent's note in the checkout, the VM stopped once the
    agent waited, after it was held while the agent worked."""
    assert (project.root / NOTE).read_text() == NOTE_TEXT
    assert project.vm_stopped()
    held, stopped = reaper_log.find("sessions still working"), reaper_log.rfind("stopping ")
    assert -1 < held < stopped, reaper_log
