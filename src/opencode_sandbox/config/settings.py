"""The effective configuration, and where each value came from."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.egress import EgressPolicy, EgressRule, Profile, SecretRule
from opencode_sandbox.core.host_mounts import HostMount
from opencode_sandbox.core.ports import PublishedPort
from opencode_sandbox.core.records import Record
from opencode_sandbox.runtime.kind import RuntimeKind

if TYPE_CHECKING:
    from opencode_sandbox.core.agents.profile import AgentProfile


class Settings(Record):
    """A named tuple rather than a dataclass: it is built on every command, start-up counts."""

    runtime: RuntimeKind
    agent: str
    """The name of the agent's profile (`core/agents`): a built-in one, or one of `agents`."""
    agents: tuple[AgentProfile, ...]
    """The user's own agents (`core/agents/custom.py`)."""
    workspace: str
    """`shared` or `isolated` (`core/workspace`)."""
    cpus: int
    memory: int
    pids_limit: int
    auto_stop_timeout: timedelta
    auto_stop_on_active_sessions: bool
    auto_stop_max_session_retries: int
    notify: bool
    terminal_clipboard: bool
    daemon_start_timeout: timedelta
    auto_prune_age: timedelta
    manual_prune_age: timedelta
    dind: bool
    extra_ca_certificates: tuple[Path, ...]
    trust_host_ca: bool
    network: Profile
    egress_allow: tuple[EgressRule, ...]
    egress_deny: tuple[EgressRule, ...]
    secrets: tuple[SecretRule, ...]
    mounts: tuple[HostMount, ...]
    ports: tuple[PublishedPort, ...]
    releases_url: str
    guarded_paths: tuple[str, ...]
    git_sync_branches: int
    sources: dict[str, str]
    """Key name -> `default`, a file with its line, an environment variable or a flag."""
    agent_from_checkout: bool = False
    """The checkout's own file chose the agent: it may narrow what the VM may do, never widen it, so
    the agent's hosts are not allowed and its credentials do not become secrets of their own accord."""

    @property
    def egress_policy(self) -> EgressPolicy:
        return EgressPolicy(self.network, self.egress_allow + self.agent_hosts, self.egress_deny, self.secrets)

    @property
    def agent_profile(self) -> AgentProfile:
        """The chosen agent's profile, built-in or the user's own."""
        return self.profile_named(self.agent)

    def profile_named(self, name: str) -> AgentProfile:
        """The profile of the agent called `name`, built-in or the user's own; KeyError for neither."""
        from opencode_sandbox.core.agents import find_profile

        profile = find_profile(name, self.agents)
        if profile is None:
            raise KeyError(name)
        return profile

    @property
    def agent_hosts(self) -> tuple[EgressRule, ...]:
        """What the agent needs to reach, allowed on top of `egress-allow` under the allowlist profile."""
        if self.network is not Profile.ALLOWLIST or self.agent_from_checkout:
            return ()
        from opencode_sandbox.core.egress import parse_rule

        allowed = {rule.text for rule in self.egress_allow}
        return tuple(parse_rule(host) for host in self.agent_profile.hosts if host not in allowed)

    @property
    def memory_mib(self) -> int:
        return self.memory // (1024 * 1024)
