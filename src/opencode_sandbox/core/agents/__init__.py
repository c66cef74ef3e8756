"""The coding agents a sandbox can run, each a profile: how the image installs it, how a session
starts it, what of the user's configuration the VM gets, which credentials it reads (as secrets)
and which hosts it needs, and how the tool learns whether it is working.

One module per agent beside this one; `PROFILES` names them. `custom.py` makes the profiles of the
user's own agents from their configuration; `find_profile` looks in both. Pure data: nothing here
touches the machine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping

from opencode_sandbox.core.agents.profile import ActivitySource, AgentProfile, Credential, SessionKind
from opencode_sandbox.core.egress import SecretRule, parse_rule

__all__ = ["DEFAULT_AGENT", "PROFILES", "ActivitySource", "AgentProfile", "Credential", "SessionKind", "activity_of",
           "agent_in_labels", "find_profile", "implied_secrets", "profile_of"]

_NAMES = ("opencode", "claude-code", "codex", "gemini", "qwen-code", "pi", "crush", "droid", "cline", "copilot")
"""The built-in agents; each one's `PROFILE` is in the module beside this one named after it
(`claude-code` in `claude_code.py`)."""


class _Profiles(Mapping[str, AgentProfile]):
    """The built-in profiles by name, each module loaded when its profile is first asked for: a
    start needs one agent's, and loading all ten was a tenth of a warm start's imports."""

    def __getitem__(self, name: str) -> AgentProfile:
        if name not in _NAMES:
            raise KeyError(name)
        module = importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
        profile: AgentProfile = module.PROFILE
        return profile

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)

    def __contains__(self, name: object) -> bool:
        return name in _NAMES


PROFILES: Mapping[str, AgentProfile] = _Profiles()
DEFAULT_AGENT = "opencode"


def profile_of(name: str) -> AgentProfile:
    """The profile called `name`; KeyError for a name no profile has (the settings refuse those)."""
    return PROFILES[name]


def find_profile(name: str, own: tuple[AgentProfile, ...] = ()) -> AgentProfile | None:
    """The built-in profile called `name`, else the user's own agent of that name (`core/agents/custom.py`);
    None for neither."""
    return PROFILES.get(name) or next((profile for profile in own if profile.name == name), None)


def activity_of(name: str) -> ActivitySource:
    """How the tool learns whether agent `name` works: a built-in's profile says; an agent of the
    user's own has no hooks, so its terminal tells."""
    profile = PROFILES.get(name)
    return profile.activity if profile is not None else ActivitySource.TERMINAL


def implied_secrets(profile: AgentProfile, configured: tuple[SecretRule, ...],
                    has_value: Callable[[str], bool]) -> tuple[SecretRule, ...]:
    """The agent's credentials that become secrets of their own accord: each one the user has a
    value for (`has_value`) and did not configure as a secret already, sent only to its provider's
    hosts. Without a value the agent uses whatever login it keeps in the VM's home."""
    named = {secret.name for secret in configured}
    return tuple(
        SecretRule(credential.variable, tuple(parse_rule(host) for host in credential.hosts), credential.headers)
        for credential in profile.credentials
        if credential.variable not in named and has_value(credential.variable)
    )


def agent_in_labels(labels: Mapping[str, str]) -> str:
    """The agent a VM runs, as its labels say; VMs made before agents had profiles run opencode."""
    from opencode_sandbox.core.naming import LABEL_AGENT

    return labels.get(LABEL_AGENT) or DEFAULT_AGENT
