"""Gemini CLI (`@google/gemini-cli`), a terminal program in the VM's terminal session.

Its hooks report each turn: the image's system settings (`/etc/gemini-cli/settings.json`) add them
to the user's own, which need no approval. Those settings win over the user's, so they hold only
what the VM needs: no updates of its own, and the checkout trusted (Gemini CLI runs no hooks in a
folder it does not trust, and asks about each new folder on its first start).
"""

from __future__ import annotations

import json

from opencode_sandbox.core.agents.profile import (
    AgentProfile,
    ConfigSource,
    Credential,
    SessionKind,
    matcher_hooks,
)

_HOOKS = {
    "SessionStart": "idle",
    "BeforeAgent": "busy",
    "BeforeTool": "busy",
    "AfterTool": "busy",
    "Notification": "asking",
    "AfterAgent": "waiting",
    "SessionEnd": "ended",
}
SYSTEM_SETTINGS = json.dumps(
    {
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "security": {"folderTrust": {"enabled": False}},
        "hooks": matcher_hooks(_HOOKS),
    },
    indent=2,
) + "\n"

PROFILE = AgentProfile(
    name="gemini",
    title="Gemini CLI",
    package="@google/gemini-cli",
    command="gemini",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".gemini/settings.json", ".gemini/settings.json"),
        ConfigSource(".gemini/.env", ".gemini/.env"),
        ConfigSource(".gemini/GEMINI.md", ".gemini/GEMINI.md"),
        ConfigSource(".gemini/agents", ".gemini/agents"),
        ConfigSource(".gemini/commands", ".gemini/commands"),
        ConfigSource(".gemini/skills", ".gemini/skills"),
        ConfigSource(".gemini/policies", ".gemini/policies"),
    ),
    credentials=(Credential("GEMINI_API_KEY", ("generativelanguage.googleapis.com",), ("x-goog-api-key",)),),
    hosts=("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com",
           "accounts.google.com", "play.googleapis.com"),
    image_files=(("/etc/gemini-cli/settings.json", SYSTEM_SETTINGS),),
    # The VM is the sandbox: a container of Gemini CLI's own would need a container engine in the VM.
    environment=(("GEMINI_SANDBOX", "false"),),
    checkout_config=ConfigSource("gemini", ".gemini"),
    logins=(".gemini/oauth_creds.json", ".gemini/google_accounts.json", ".gemini/mcp-oauth-tokens.json"),
)
