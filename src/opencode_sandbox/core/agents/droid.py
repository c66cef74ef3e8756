"""Factory Droid (`@factory/cli`), a terminal program in the VM's terminal session.

Its hooks report each turn: the image's system settings (`/etc/factory/settings.json`) hold them,
and Droid runs them beside the user's own without asking. Its interface asks for a Factory sign-in
(or `FACTORY_API_KEY`) even when a model of the user's own (`customModels` in
`~/.factory/settings.json`, its key as `${VARIABLE}`) does the work.
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
    "UserPromptSubmit": "busy",
    "PreToolUse": "busy",
    "PostToolUse": "busy",
    "Notification": "asking",
    "Stop": "waiting",
    "SessionEnd": "ended",
}
SYSTEM_SETTINGS = json.dumps(
    {"hooks": matcher_hooks(_HOOKS)},
    indent=2,
) + "\n"

PROFILE = AgentProfile(
    name="droid",
    title="Factory Droid",
    package="@factory/cli",
    command="droid",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".factory/settings.json", ".factory/settings.json"),
        ConfigSource(".factory/mcp.json", ".factory/mcp.json"),
        ConfigSource(".factory/AGENTS.md", ".factory/AGENTS.md"),
        ConfigSource(".factory/droids", ".factory/droids"),
        ConfigSource(".factory/commands", ".factory/commands"),
        ConfigSource(".factory/skills", ".factory/skills"),
    ),
    credentials=(Credential("FACTORY_API_KEY", ("api.factory.ai",), ("authorization",)),),
    hosts=("api.factory.ai", "app.factory.ai", "auth.factory.ai"),
    image_files=(("/etc/factory/settings.json", SYSTEM_SETTINGS),),
    environment=(("FACTORY_DROID_AUTO_UPDATE_ENABLED", "false"),),
    checkout_config=ConfigSource("droid", ".factory"),
    logins=(".factory/auth.json", ".factory/config.json"),
)
