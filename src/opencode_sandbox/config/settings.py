"""The effective configuration, and where each value came from."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from opencode_sandbox.core.egress import EgressPolicy, EgressRule, Profile, SecretRule
from opencode_sandbox.core.host_mounts import HostMount
from opencode_sandbox.core.ports import PublishedPort
from opencode_sandbox.core.records import Record
from opencode_sandbox.runtime.kind import RuntimeKind


class Settings(Record):
    """A named tuple rather than a dataclass: it is built on every command, start-up counts."""

    runtime: RuntimeKind
    cpus: int
    memory: int
    pids_limit: int
    auto_stop_timeout: timedelta
    auto_stop_on_active_sessions: bool
    auto_stop_max_session_retries: int
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
    sources: dict[str, str]
    """Key name -> `default`, a file with its line, an environment variable or a flag."""

    @property
    def egress_policy(self) -> EgressPolicy:
        return EgressPolicy(self.network, self.egress_allow, self.egress_deny, self.secrets)

    @property
    def memory_mib(self) -> int:
        return self.memory // (1024 * 1024)
