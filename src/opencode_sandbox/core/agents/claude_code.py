"""Claude Code (`@anthropic-ai/claude-code`), a terminal program in the VM's terminal session.

Its hooks report each turn: the image's managed settings (`/etc/claude-code/managed-settings.json`)
add them to whatever the user's own settings hold, and need no approval from the user.
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
MANAGED_SETTINGS = json.dumps(
    {"hooks": matcher_hooks(_HOOKS)},
    indent=2,
) + "\n"

PROFILE = AgentProfile(
    name="claude-code",
    title="Claude Code",
    package="@anthropic-ai/claude-code",
    command="claude",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".claude/settings.json", ".claude/settings.json"),
        ConfigSource(".claude/CLAUDE.md", ".claude/CLAUDE.md"),
        ConfigSource(".claude/agents", ".claude/agents"),
        ConfigSource(".claude/commands", ".claude/commands"),
        ConfigSource(".claude/skills", ".claude/skills"),
    ),
    credentials=(Credential("ANTHROPIC_API_KEY", ("api.anthropic.com",), ("x-api-key",)),),
    hosts=("api.anthropic.com", "claude.ai", "console.anthropic.com", "statsig.anthropic.com"),
    image_files=(("/etc/claude-code/managed-settings.json", MANAGED_SETTINGS),),
    environment=(("DISABLE_AUTOUPDATER", "1"),),
    checkout_config=ConfigSource("claude-code", ".claude"),
    logins=(".claude/.credentials.json", ".claude.json"),
)
