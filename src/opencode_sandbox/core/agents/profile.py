"""What a profile says about its agent."""

from __future__ import annotations

from enum import StrEnum

from opencode_sandbox.core.records import Record

STATE_FOLDER = ".local/state/opencode-sandbox"
"""Below the VM home: where this tool keeps what it writes there."""
ACTIVITY_FILE = f"{STATE_FOLDER}/agent-activity"
"""Below the VM home: the agent's last reported state, one line `<state> <unix time in ns>`, written by
`AGENT_EVENT` from the agent's hooks."""
AGENT_EVENT = "/usr/local/bin/opencode-sandbox-agent-event"
"""In the image: the program an agent's hooks call with a state (`busy`, `waiting`, `asking`, `ended`)."""
SESSION_NAME = "agent"
"""The terminal multiplexer's session the agent runs in, one per VM."""


class SessionKind(StrEnum):
    SERVER = "server"
    """The agent serves its sessions itself (opencode serve); a client attaches to the server."""
    TERMINAL = "terminal"
    """The agent is a terminal program: it runs in a terminal multiplexer's session inside the VM,
    which outlives the user's terminal; its hooks or its terminal's output tell its turns (`activity`)."""


class ActivitySource(StrEnum):
    HOOKS = "hooks"
    """The agent's hooks (or its extension, or its event stream) call `AGENT_EVENT` with each state."""
    TERMINAL = "terminal"
    """The agent has no hooks: its session's terminal output tells a turn in progress from a quiet one."""


class Credential(Record):
    variable: str
    """The environment variable the agent reads its key from."""
    hosts: tuple[str, ...]
    """Where the key may be sent: the provider's API."""
    headers: tuple[str, ...]
    """The request headers the agent's client sends the key in."""


class ConfigSource(Record):
    host: str
    """A file or folder of the user's, relative to their home."""
    target: str
    """Where it goes, relative to the VM home."""


class AgentProfile(Record):
    name: str
    """The value of the `agent` setting."""
    title: str
    """How people name it."""
    package: str
    """The npm package the image installs; empty for an agent its `install` command installs."""
    command: str
    """The program the package puts on the PATH."""
    session: SessionKind
    config: tuple[ConfigSource, ...]
    """The user's configuration copied into the VM home, never their logins."""
    credentials: tuple[Credential, ...]
    hosts: tuple[str, ...]
    """What the agent needs to reach under the `allowlist` network profile, its credentials' hosts included."""
    image_files: tuple[tuple[str, str], ...] = ()
    """Files the image gets beside the agent, as (path in the image, content): its hooks' settings."""
    system_packages: tuple[str, ...] = ()
    """Debian packages the image installs beside the agent: programs it looks for at every start and
    would otherwise download itself."""
    environment: tuple[tuple[str, str], ...] = ()
    """Set in the image for every process: what keeps the agent from updating itself in the VM."""
    default_arguments: tuple[str, ...] = ()
    """Put before the user's own arguments when a session starts the agent."""
    activity: ActivitySource = ActivitySource.HOOKS
    """How the tool learns whether the agent is in the middle of a turn."""
    checkout_config: ConfigSource | None = None
    """A folder of the checkout, relative to its `.opencode-sandbox/`, copied over the user's configuration."""
    logins: tuple[str, ...] = ()
    """Where the agent keeps its logins, relative to the home: never copied into the VM, and no
    configuration of an agent of the user's own may name them."""
    install: str = ""
    """A shell script run as root at image build that installs the agent instead of `package`
    (an agent of the user's own): its version is the script's to choose, and nothing checks for updates."""
    version_flag: str = "--version"
    """The argument that makes `command` print its version, run once at build to prove the install;
    empty: the build checks only that `command` is on the PATH."""

    def session_command(self, arguments: tuple[str, ...] | list[str]) -> list[str]:
        """The agent's command line in a terminal session, the user's arguments after it."""
        return [self.command, *self.default_arguments, *arguments]


def matcher_hooks(states: dict[str, str], matcher: bool = True) -> dict[str, list[dict[str, object]]]:
    """The hooks table Claude Code's settings introduced and Droid, Gemini CLI and Qwen Code read too:
    for each event, one command that reports its state through `AGENT_EVENT` (with an empty `matcher`
    where the agent filters tools by one)."""
    return {event: [{**({"matcher": ""} if matcher else {}),
                     "hooks": [{"type": "command", "command": f"{AGENT_EVENT} {state}"}]}]
            for event, state in states.items()}
