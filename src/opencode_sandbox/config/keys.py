"""Every configuration key: its type, default and how a written value is read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.egress import EgressRule, Profile, SecretRule, parse_profile, parse_rule
from opencode_sandbox.core.guard import check_guarded_path
from opencode_sandbox.core.host_mounts import HostMount, parse_mounts
from opencode_sandbox.core.ports import PublishedPort, checkout_refusal, merged, parse_ports
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.core.units import parse_duration, parse_size
from opencode_sandbox.core.workspace import ISOLATED, SHARED, WORKSPACES
from opencode_sandbox.runtime.env_passing import read_by_the_host_program
from opencode_sandbox.runtime.kind import DEFAULT as DEFAULT_RUNTIME
from opencode_sandbox.runtime.kind import RuntimeKind, shares_host_kernel

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.core.agents import AgentProfile

DEFAULT_RELEASES_URL = "https://api.github.com/repos/sst/opencode/releases/latest"
MIN_MEMORY = 512 * 1024**2
MAX_CPUS = 256



def _shown(value: object) -> str:
    """A configured value as an error quotes it: text cut at 80 characters, a list or a table by its
    kind alone (a few bytes of YAML aliases can stand for gigabytes of nested lists)."""
    if isinstance(value, str):
        return f"'{value[:80]}'" + ("..." if len(value) > 80 else "")
    if value is None or isinstance(value, bool | int | float):
        return f"'{value}'"
    if isinstance(value, list):
        return "a list"
    return "a table" if isinstance(value, dict) else f"a {type(value).__name__}"


def _read_runtime(value: Any) -> RuntimeKind:
    choices = ", ".join(kind.value for kind in RuntimeKind)
    if not isinstance(value, str) or value not in {kind.value for kind in RuntimeKind}:
        raise ValueError(f"{_shown(value)} is not a runtime; choose one of: {choices}")
    return RuntimeKind(value)


def _read_agent(value: Any) -> str:
    """A name; whether an agent has it is known once `agents` is read too (`loader.py`)."""
    from opencode_sandbox.core.agents import PROFILES

    if not isinstance(value, str) or not value:
        raise ValueError(f"{_shown(value)} is not an agent; choose one of: {', '.join(PROFILES)}, or one of your own")
    return value


def _read_agents(value: Any) -> tuple[AgentProfile, ...]:
    from opencode_sandbox.core.agents import PROFILES
    from opencode_sandbox.core.agents.custom import parse_agents

    agents = parse_agents(value, PROFILES)
    for agent in agents:
        for credential in agent.credentials:
            if read_by_the_host_program(credential.variable):
                raise ValueError(f"{agent.name}: credentials: '{credential.variable}' is read by msb or docker on "
                                 "this host itself; it cannot be a secret")
    return agents


def _agents_joined(earlier: tuple[AgentProfile, ...], later: tuple[AgentProfile, ...]) -> tuple[AgentProfile, ...]:
    """A later file's agents added to an earlier one's; one of the same name replaces it."""
    named = {agent.name: agent for agent in earlier}
    named.update((agent.name, agent) for agent in later)
    return tuple(named.values())


def _read_int(minimum: int, maximum: int) -> Callable[[Any], int]:
    def read(value: Any) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{_shown(value)} is not a whole number")
        number: int = value
        if not minimum <= number <= maximum:
            raise ValueError(f"{number} is out of range; use {minimum} to {maximum}")
        return number

    return read


def _read_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"{_shown(value)} is not true or false")


def _read_duration(value: Any) -> timedelta:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValueError(f"{_shown(value)} is not a duration; write it as 10s, 90m, 24h or 30d")
    return parse_duration(str(value))


def _read_memory(value: Any) -> int:
    if not isinstance(value, str) or isinstance(value, bool):
        raise ValueError(f"{_shown(value)} is not a size; write it as 512M or 4G")
    size = parse_size(value)
    if size < MIN_MEMORY:
        raise ValueError(f"{_shown(value)} is below the minimum of 512M")
    return size


def _read_paths(value: Any) -> tuple[Path, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
        raise ValueError("expected a list of file paths")
    return tuple(Path(item).expanduser() for item in items)


def _paths_relative_to(paths: tuple[Path, ...], base: Path) -> tuple[Path, ...]:
    return tuple(path if path.is_absolute() else base / path for path in paths)


def _mounts_relative_to(mounts: tuple[HostMount, ...], base: Path) -> tuple[HostMount, ...]:
    return tuple(mount.relative_to(base) for mount in mounts)


def _joined_ports(earlier: tuple[PublishedPort, ...], given: tuple[PublishedPort, ...]) -> tuple[PublishedPort, ...]:
    return merged([*earlier, *given])


def _read_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"{_shown(value)} is not an http(s) URL")
    return value


def _read_rules(value: Any) -> tuple[EgressRule, ...]:
    """A list of rules, or one rule per comma in a string (the environment variable's form)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueError("expected a list of rules: host names, *.domain or address ranges, with an optional :port")
    return tuple(parse_rule(item) for item in items)


def _read_secrets(value: Any) -> tuple[SecretRule, ...]:
    secrets = parse_secrets(value)
    for secret in secrets:
        if read_by_the_host_program(secret.name):
            raise ValueError(f"'{secret.name}' is read by msb or docker on this host itself; it cannot be a secret")
    return secrets


def _read_guarded_paths(value: Any) -> tuple[str, ...]:
    """A list of paths relative to the checkout, or one per comma in a string."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ValueError("expected a list of paths relative to the checkout, such as [.husky, Makefile]")
    return tuple(check_guarded_path(item.strip()) for item in items)


class Key(Record):
    name: str
    default: Any
    read: Callable[[Any], Any]
    help: str
    relative_to: Callable[[Any, Path], Any] | None = None
    """Turns the relative paths of a read value into paths from the folder of the file that set it
    (for a variable or a flag, the current folder)."""
    in_checkout: bool = True
    """May be set in the checkout's own file, which the agent in the VM can write."""
    checkout_refusal: Callable[[Any, Any], str | None] | None = None
    """For a key the checkout's file may set: why its value there (first argument) may not come from
    there, given what the user's own files and the default give (second), or None when it may."""
    checkout_note: str = ""
    """What the checkout's file may set, for the documentation, where `checkout_refusal` judges it."""
    flag: str = ""
    """The command line's option for the key, where it is not `--NAME`."""
    join_flag: Callable[[Any, Any], Any] | None = None
    """How a value given on the command line joins that of the files and the environment (ValueError
    when it cannot); None: it replaces it."""
    join_files: Callable[[Any, Any], Any] | None = None
    """How a value of a later file joins that of an earlier one; None: it replaces it."""
    checkout_reason: str = ""
    """For a key the checkout's file may not set: why, in the refusal."""

    @property
    def attribute(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env_variable(self) -> str:
        return "OPENCODE_SANDBOX_" + self.name.replace("-", "_").upper()


def _ports_from_checkout(ports: Any, _users: Any) -> str | None:
    return checkout_refusal(ports)


def _narrower_runtime(value: Any, users: Any) -> str | None:
    if shares_host_kernel(value) and not shares_host_kernel(users):
        return (f"the {value.value} runtime shares the host's kernel, a weaker isolation than the {users.value} "
                "runtime your configuration chooses")
    return None


_PROFILE_REACH = (Profile.NONE, Profile.ALLOWLIST, Profile.PUBLIC, Profile.ALL)


def _narrower_profile(value: Any, users: Any) -> str | None:
    if _PROFILE_REACH.index(value) > _PROFILE_REACH.index(users):
        return f"the {value.value} network profile reaches more than {users.value}, which your configuration gives"
    return None


def _not_turned_on(what: str) -> Callable[[Any, Any], str | None]:
    def refusal(value: Any, users: Any) -> str | None:
        return f"it would turn on {what}, which your configuration leaves off" if value and not users else None

    return refusal


def _read_workspace(value: Any) -> str:
    if value not in WORKSPACES:
        raise ValueError(f"{_shown(value)} is not a workspace mode; choose shared or isolated")
    return str(value)


def _wider_workspace(value: Any, users: Any) -> str | None:
    if value == SHARED and users == ISOLATED:
        return "the shared mode lets the VM write your checkout, which your configuration keeps isolated"
    return None


def _not_shorter(value: Any, users: Any) -> str | None:
    if value < users:
        return (f"it is shorter than {users}, which your configuration gives: pruning would remove what other "
                "projects left unused sooner than you chose")
    return None


def _not_higher(value: Any, users: Any) -> str | None:
    if value > users:
        return f"it is higher than {users}, which your configuration gives"
    return None


KEYS: tuple[Key, ...] = (
    Key("runtime", DEFAULT_RUNTIME, _read_runtime,
        "VM runtime: microsandbox (microVMs) or docker (shares the host kernel)", checkout_refusal=_narrower_runtime,
        checkout_note="`microsandbox`, or `docker` where your configuration chooses it"),
    Key("agent", "opencode", _read_agent,
        "the coding agent the VM runs: opencode, claude-code, codex, gemini, qwen-code, pi, crush, droid, cline "
        "or copilot, or one of `agents` (docs/agents.md)"),
    Key("agents", (), _read_agents,
        "agents of your own, by name, each with its npm `package` (or an `install` script run as root at image "
        "build), its `command`, and optionally its `title`, `arguments`, `credentials` (variable, hosts, headers: "
        "secrets of their own accord), `hosts` (for `allowlist`), `config` (files and folders of your home copied "
        "into the VM's) and `environment` (docs/agents.md#an-agent-of-your-own); a per-project file adds to them",
        in_checkout=False, join_files=_agents_joined,
        checkout_reason="it would run a command of the repository's choosing at image build"),
    Key("workspace", SHARED, _read_workspace,
        "where the VM works: shared (your checkout at /workspace, written live, guarded) or isolated (its own "
        "work tree, seeded from your checkout; its work reaches you as git data, through `diff` and `apply`)",
        checkout_refusal=_wider_workspace, checkout_note="`isolated`, or `shared` where your configuration keeps it",
        flag="--isolated"),
    Key("cpus", 2, _read_int(1, MAX_CPUS), "virtual CPUs of the project VM"),
    Key("memory", 4 * 1024**3, _read_memory, "memory of the project VM, such as 4G"),
    Key("pids-limit", 4096, _read_int(64, 4_194_304),
        "most processes and threads at once in a docker-runtime VM (a fork bomb stops there)",
        checkout_refusal=_not_higher, checkout_note="a limit no higher than your configuration's"),
    Key("auto-stop-timeout", timedelta(seconds=10), _read_duration,
        "how long the VM stays up after the last client leaves"),
    Key("auto-stop-on-active-sessions", False, _read_bool,
        "stop after the timeout even while opencode sessions are busy"),
    Key("auto-stop-max-session-retries", 10, _read_int(0, 1_000_000),
        "a session retrying more often than this no longer holds the VM"),
    Key("notify", True, _read_bool,
        "signal when the agent finishes a turn or asks you something: a desktop notification, else a terminal bell"),
    Key("terminal-clipboard", False, _read_bool,
        "let the VM set your terminal's clipboard (OSC 52) through an attached session; it can never read it",
        checkout_refusal=_not_turned_on("clipboard writes from the VM"),
        checkout_note="`false`, or `true` where your configuration turns it on"),
    Key("daemon-start-timeout", timedelta(seconds=90), _read_duration,
        "how long a run waits for opencode serve to answer; raise it on slow hosts"),
    Key("auto-prune-age", timedelta(days=30), _read_duration,
        "age after which run and shell prune unused artifacts", checkout_refusal=_not_shorter,
        checkout_note="an age no shorter than your configuration's"),
    Key("manual-prune-age", timedelta(days=7), _read_duration, "default age for prune",
        checkout_refusal=_not_shorter, checkout_note="an age no shorter than your configuration's"),
    Key("dind", False, _read_bool, "use the Docker-in-Docker base image",
        checkout_refusal=_not_turned_on("Docker-in-Docker, whose VM runs privileged on the docker runtime"),
        checkout_note="`false`, or `true` where your configuration turns it on"),
    Key("extra-ca-certificates", (), _read_paths,
        "PEM files trusted by the tool's HTTPS requests, in image builds and in the VM",
        relative_to=_paths_relative_to, in_checkout=False),
    Key("trust-host-ca", True, _read_bool,
        "trust the host's locally added CA certificates in builds and the VM",
        checkout_refusal=_not_turned_on("trust in the host's own CA certificates"),
        checkout_note="`false`, or `true` where your configuration leaves it on"),
    Key("network", Profile.PUBLIC, parse_profile,
        "where the VM may connect: public (the internet, no private ranges, not the host), "
        "allowlist (only egress-allow and the hosts of secrets), none (nothing) or all (no restriction)",
        checkout_refusal=_narrower_profile,
        checkout_note="a profile that reaches no more than your configuration's (none < allowlist < public < all)"),
    Key("egress-allow", (), _read_rules,
        "destinations the VM may reach on top of the network profile: host, *.domain or CIDR, "
        "each with an optional :port", in_checkout=False),
    Key("egress-deny", (), _read_rules,
        "destinations the VM may never reach, whatever the profile and egress-allow say"),
    Key("secrets", (), _read_secrets,
        "environment variables whose value the VM never holds, each with the hosts (host or *.domain) "
        "it may be sent to, and optionally the request headers it may be put in; the VM sees a placeholder",
        in_checkout=False),
    Key("mounts", (), parse_mounts,
        "host folders or files mounted into the VM, each HOST_PATH:GUEST_PATH, read-only unless it ends "
        "in :rw; not on /workspace, /home/dev, /tmp or system folders",
        relative_to=_mounts_relative_to, in_checkout=False),
    Key("ports", (), parse_ports,
        "guest TCP ports published on the host's 127.0.0.1, each GUEST_PORT (a free host port is "
        "picked) or HOST_PORT:GUEST_PORT",
        checkout_refusal=_ports_from_checkout, checkout_note="guest ports only (a free host port is picked)",
        flag="--publish", join_flag=_joined_ports),
    Key("guarded-paths", (), _read_guarded_paths,
        "files and folders of the checkout the host runs, relative to its top, guarded on top of the default "
        "list (.envrc, editor settings, git hook managers' files, the coding agents' project settings, "
        ".opencode-sandbox, each in every folder; the host's core.hooksPath); any git directory below the "
        "checkout is guarded too",
        in_checkout=False),
    Key("git-sync-branches", 200, _read_int(1, 100_000),
        "the most of the VM's branches the git sync brings to the host as refs/sandbox/heads/* (the checked-out "
        "branch first, then by name)", checkout_refusal=_not_higher,
        checkout_note="a number no higher than your configuration's"),
    Key("releases-url", DEFAULT_RELEASES_URL, _read_url,
        "where the opencode update check looks for the latest release", in_checkout=False),
)

KEYS_BY_NAME = {key.name: key for key in KEYS}
