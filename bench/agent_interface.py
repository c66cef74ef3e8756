"""Time to a terminal agent's interface on the docker runtime, VM running: the launcher against
the agent's own session started by a raw `docker exec -it`, and against the bare agent.

For every terminal agent (or the ones `--agent` names), each at the version the tests pin
(`tests/fixtures/agents.py`), in one process with an isolated HOME. Once per agent, a project's agent
image is built (`build --agent AGENT --agent-version VERSION`) and its VM started by a
`shell --agent AGENT` that leaves in the VM's home what the agent keeps after a first run
(`Agent.first_run`): a warm start, since a cold one is the image build (`time_to_interface.py` times
that for opencode). Then rounds alternate, each on a new real terminal (tmux):
- the launcher: `opencode-sandbox --runtime docker --agent AGENT` until the agent's interface
  shows (the launcher starts the agent in its tmux session in the VM and attaches to it);
- the session alone: `docker exec -it` of the very tmux command the launcher attaches with (the
  agent's session, made when none runs), without the launcher;
- the bare agent: `docker exec -it --user dev -w /workspace VM AGENT` (with the arguments the
  launcher gives it, Codex's `--sandbox danger-full-access` say) until the same interface shows.
After each, outside the time measured, the agent gets the hang-up a closed terminal sends, the
same on every side (on the launcher's, its tmux session ends with it), and the next round waits
until no process in the VM reads a terminal and the terminal's command has left: an agent still
ending, or ended another way, slows the next start (by up to 150 ms for Claude Code). The agent
gets no prompt (no model provider can be reached here): its interface, drawn and waiting for one,
ends the wait. The launcher must reuse the running VM every round; the auto-stop is a day away.

Targets, for each agent: the launcher adds at most `ADDED_MS_TARGET` ms at the median to the session
alone (what the launcher itself costs), and takes at most `TARGET` times the bare agent's time (what
the user feels against running the agent with no sandbox tool at all).
Needs `opencode-sandbox/runner-base:latest` in the Docker engine, tmux, and npm's registry reachable
from a `docker build`.
Run: .venv/bin/python bench/agent_interface.py [ROUNDS] [--agent NAME ...] (default 5 rounds after
one warm-up, every terminal agent). The last line is the worst ratio against the bare agent.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.terminal_agent_scenario import (
    cannot_install,
    configure_cline,
    configure_crush,
    configure_gemini,
    configure_pi,
    configure_qwen_code,
)
from tests.fixtures.agents import PINNED_VERSIONS

from bench.common import GIVE_UP_S, Terminal, interleaved_medians, isolated_environment, launcher
from bench.warm_start import clean_up, docker, make_project
from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.core.naming import BASE_IMAGE, LABEL_OPENCODE_VERSION, VM_PREFIX, vm_name
from opencode_sandbox.guest.terminal_session import attach_command
from opencode_sandbox.images.updater import record_baked_version

TARGET = 1.25
"""The launcher against the bare agent."""
ADDED_MS_TARGET = 60.0
"""The launcher over the session alone, at the median."""
BARE = "docker exec -it"
SESSION_ALONE = "docker exec -it tmux"
TERMINAL_ENV = ("--env", "TERM", "--env", "COLORTERM")
"""The terminal's type, passed on from the terminal as the launcher passes it to the agent's session."""
POLL_S = 0.02
"""How often the terminal is read: the interface comes about half a second after the start, and the
target leaves the launcher some 50 ms, which the 50 ms of the other benchmarks would blur."""
CLAUDE_STATE = ("require('fs').writeFileSync(process.env.HOME + '/.claude.json', JSON.stringify("
                "{hasCompletedOnboarding: true, projects: {'/workspace': {hasTrustDialogAccepted: true}}}))")
CODEX_TRUST = '[projects."/workspace"]\ntrust_level = "trusted"\n'


class Agent(NamedTuple):
    interface: re.Pattern[str]
    """What the agent's interface shows once it waits for a prompt."""
    first_run: str = "true"
    """A script, run as dev in the VM, that leaves in its home what the agent keeps after a first
    run the user finished: the onboarding done and the checkout trusted (Claude Code), a key and
    the checkout trusted (Codex). Without it Claude Code shows its onboarding, which finds no
    Anthropic service here and ends within a tenth of a second, and Codex its sign-in."""
    configure: Callable[[Path, str], None] | None = None
    """Writes the user's own configuration of the agent in their home, as the end-to-end tests do
    (`tests/e2e/terminal_agent_scenario.py`): the sign-in chosen, a provider (unreachable here)."""
    key: str | None = None
    """The variable the agent reads its key from: a placeholder on the host, so its interface shows
    instead of its sign-in (the start makes it a secret, and the VM holds a placeholder of that)."""


NO_MODEL = "model.invalid"
"""The provider the agents' configuration names: never reached, since no prompt is sent."""

AGENTS = {
    "claude-code": Agent(re.compile(r"(?s)Claude Code v\d.*\u276f"),  # its banner, then its prompt
                         f'node -e "{CLAUDE_STATE}"'),
    "codex": Agent(re.compile(r">_ OpenAI Codex"),
                   "printf %s sk-placeholder | codex login --with-api-key >/dev/null && "
                   f"printf '%s' '{CODEX_TRUST}' >> ~/.codex/config.toml"),
    "gemini": Agent(re.compile(r"Type your message"), configure=configure_gemini, key="GEMINI_API_KEY"),
    "qwen-code": Agent(re.compile(r"Type your message"), configure=configure_qwen_code, key="OPENAI_API_KEY"),
    "pi": Agent(re.compile(r"pi v\d+\.\d+"), configure=configure_pi, key="OPENAI_API_KEY"),
    "crush": Agent(re.compile(r"Scripted model"), configure=configure_crush, key="OPENAI_API_KEY"),
    "cline": Agent(re.compile(r"What can I do for you|Ask anything"), configure=configure_cline, key="OPENAI_API_KEY"),
    # Its first question, whether to trust the checkout, is its interface on every start of a VM whose
    # home holds no answer; signed out, its next screen is a sign-in.
    "copilot": Agent(re.compile(r"Do you trust the files in this folder")),
    "droid": Agent(re.compile(r"Please login with your Factory account")),  # it asks for a sign-in first
}
"""Every terminal agent (`tests/test_docs_examples.py` holds the names equal to the profiles').
"""


def wait_for(terminal: Terminal, condition: Callable[[], bool], what: str, give_up_s: float = GIVE_UP_S,
             while_running: bool = True) -> None:
    """Until `condition`; a failure once `give_up_s` passed or, `while_running`, once the command ended."""
    deadline = time.monotonic() + give_up_s
    while not condition():
        if time.monotonic() > deadline or (while_running and terminal.ended()):
            raise SystemExit(f"{what} did not happen; the terminal shows:\n{terminal.screen().rstrip()}")
        time.sleep(POLL_S)


def to_the_interface(command: list[str], project: Path, env: dict[str, str], interface: re.Pattern[str],
                     end: Callable[[], None], what: str) -> float:
    """From starting `command` on a new terminal until `interface` shows there. `end` then ends
    the agent, and the command is waited for until it has left."""
    began = time.perf_counter()
    terminal = Terminal(command, project, env)
    try:
        wait_for(terminal, lambda: terminal.shows(interface), what)
        seconds = time.perf_counter() - began
        end()
        try:
            wait_for(terminal, terminal.ended, f"the end of {command[0]} after {what}", give_up_s=60,
                     while_running=False)
        except SystemExit as failure:
            container = next((word for word in command if word.startswith(VM_PREFIX)), None)
            left = docker("exec", container, "ps", "-eo", "pid,pgid,sid,tty,stat,args") if container else ""
            raise SystemExit(f"{failure.code}\nthe VM's processes then:\n{left}") from None
        return seconds
    finally:
        terminal.close()


SETTLE = ("for _ in $(seq 1500); do on_a_terminal=; for fd in /proc/[0-9]*/fd/0; do "
          'case "$(readlink "$fd")" in /dev/pts/*) on_a_terminal=1; break;; esac; done; '
          '[ -z "$on_a_terminal" ] && exit 0; sleep 0.02; done; exit 1')
"""Until no process in the VM reads a terminal: the agent (and a tmux session) has finished ending,
and its exit does not overlap the next round. Fails after 30 s."""


def hang_up(container: str) -> Callable[[], None]:
    """SIGHUP to every process group on a terminal in the VM (the agent's: whatever its process is
    called, `node` for most), as a closed terminal sends, the same on both sides: the raw exec's
    agent, or the launcher's (and the shell of its tmux session, whose end ends the session, its
    server and the attached client). What the agent started apart from its terminal (Codex's app server)
    stays, as it would on any ending of a session. Then until the agent has finished ending."""
    script = ("for group in $(ps -eo pgid=,tty= | awk '$2 != \"?\" {print $1}' | sort -u); "
              f'do kill -HUP -"$group"; done; {SETTLE}')

    def end() -> None:
        subprocess.run(["docker", "exec", "--user", "dev", container, "sh", "-c", script], capture_output=True,
                       check=True)

    return end


def measure(name: str, root: Path, shared_env: dict[str, str], rounds: int) -> dict[str, float]:
    agent, profile = AGENTS[name], profile_of(name)
    pinned = PINNED_VERSIONS[name]
    env = dict(shared_env)
    if agent.configure is not None:
        agent.configure(Path(env["HOME"]), NO_MODEL)
    if agent.key is not None:
        env[agent.key] = "sk-bench-placeholder"
    project, slug = make_project(Path(tempfile.mkdtemp(dir=root)))
    container = vm_name(slug)
    tool = launcher()
    try:
        began = time.perf_counter()
        for step in (["build", "--agent", name, "--agent-version", pinned],
                     ["shell", "--agent", name, "--", "sh", "-c", agent.first_run]):
            done = subprocess.run([*tool, *step], cwd=project, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(step[:3])} failed:\n{done.stdout}{done.stderr}")
        print(f"{name}: image built and VM started in {time.perf_counter() - began:.1f} s", flush=True)
        vm = docker("inspect", "--format", "{{.Id}}", container)

        end = hang_up(container)
        raw_exec = ["docker", "exec", "-it", "--user", "dev", "--workdir", "/workspace", container]
        medians = interleaved_medians(
            {"launcher": lambda: to_the_interface([*tool, "--runtime", "docker", "--agent", name], project, env,
                                                  agent.interface, end, f"{profile.title}'s interface"),
             BARE: lambda: to_the_interface(
                 [*raw_exec, *profile.session_command(())], project, env, agent.interface, end,
                 f"{profile.title}'s interface through docker exec -it"),
             SESSION_ALONE: lambda: to_the_interface(
                 [*raw_exec[:-1], *TERMINAL_ENV, container, *attach_command(profile, ())], project, env,
                 agent.interface, end, f"{profile.title}'s interface in its tmux session through docker exec -it")},
            rounds=rounds, warmup=1,
        )
        if docker("inspect", "--format", "{{.Id}}", container) != vm:
            raise SystemExit(f"the launcher made a new VM for {profile.title} instead of reusing the running one")
        return medians
    finally:
        clean_up(slug)


def main(rounds: int = 5, agents: tuple[str, ...] = tuple(AGENTS)) -> float:
    version = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL_OPENCODE_VERSION}"}}}}',
                     BASE_IMAGE)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = isolated_environment(root)
        env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="24h")
        record_baked_version(Path(env["XDG_STATE_HOME"]) / "opencode-sandbox", version)
        for name in agents:
            if reason := cannot_install(name, PINNED_VERSIONS[name]):
                print(f"{name}: not measured: {reason}", flush=True)
                continue
            try:
                results[name] = measure(name, root, env, rounds)
            except SystemExit as failure:  # one agent that cannot be measured leaves the others' figures
                print(f"{name}: not measured: {failure.code}", flush=True)
                continue
            medians = results[name]
            print(f"{name}: launcher {medians['launcher'] * 1000:.1f} ms, session alone "
                  f"{medians[SESSION_ALONE] * 1000:.1f} ms, bare {medians[BARE] * 1000:.1f} ms", flush=True)
    if not results:
        raise SystemExit("no agent could be measured")
    print(f"{'agent':<13}{'launcher ms':>12}{'session ms':>12}{'added ms':>10}{'target':>8}"
          f"{'bare ms':>9}{'ratio':>7}{'target':>8}   rounds: {rounds}")
    for name, medians in results.items():
        launcher_s, alone_s, bare_s = medians["launcher"], medians[SESSION_ALONE], medians[BARE]
        print(f"{name:<13}{launcher_s * 1000:>12.1f}{alone_s * 1000:>12.1f}{(launcher_s - alone_s) * 1000:>10.1f}"
              f"{ADDED_MS_TARGET:>8.0f}{bare_s * 1000:>9.1f}{launcher_s / bare_s:>7.2f}{TARGET:>8.2f}")
    for name, medians in results.items():
        added_ms = (medians["launcher"] - medians[SESSION_ALONE]) * 1000
        print(f"{name} added ms (launcher - session alone): {added_ms:.1f}")
        print(f"{name} ratio (launcher / bare agent): {medians['launcher'] / medians[BARE]:.2f}")
    worst = max(medians["launcher"] / medians[BARE] for medians in results.values())
    print(f"worst ratio (launcher / bare agent): {worst:.2f}")
    return worst


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--agent", action="append", choices=sorted(AGENTS),
                        help="only this agent (repeatable; default: every terminal agent)")
    arguments = parser.parse_args()
    main(arguments.rounds, tuple(arguments.agent) if arguments.agent else tuple(AGENTS))
