"""opencode, the default agent: `opencode serve` in the VM, `opencode attach` on the terminal."""

from __future__ import annotations

from opencode_sandbox.core.agents.profile import AgentProfile, SessionKind

PROFILE = AgentProfile(
    name="opencode",
    title="opencode",
    package="opencode-ai",
    command="opencode",
    session=SessionKind.SERVER,
    # Provisioned by `services/provisioning.py` (its logins need the secrets' names to leave keys out).
    config=(),
    # Any of its providers' keys can be a secret (`core/providers.py`); it needs none of them in particular.
    credentials=(),
    # Under `allowlist` it reaches what the user allows: its providers' hosts are theirs to choose.
    hosts=(),
    logins=(".local/share/opencode/auth.json", ".local/share/opencode/mcp-auth.json"),
)
