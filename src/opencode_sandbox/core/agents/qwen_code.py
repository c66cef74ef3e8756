"""Qwen Code (`@qwen-code/qwen-code`), a terminal program in the VM's terminal session.

Its hooks report each turn: the image's system settings (`/etc/qwen-code/settings.json`) add them
to the user's own, and run whether or not the checkout is trusted, without the user's approval.
Those settings win over the user's, so they hold only the hooks, no updates of its own, and the
image's `rg` in place of the copy in its package (which npm installs without the right to run it).
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
    "PostToolUseFailure": "busy",
    "PermissionRequest": "asking",
    "Stop": "waiting",
    "StopFailure": "waiting",
    "SessionEnd": "ended",
}
SYSTEM_SETTINGS = json.dumps(
    {
        "general": {"enableAutoUpdate": False},
        "tools": {"useBuiltinRipgrep": False},
        "hooks": matcher_hooks(_HOOKS, matcher=False),
    },
    indent=2,
) + "\n"

PROFILE = AgentProfile(
    name="qwen-code",
    title="Qwen Code",
    package="@qwen-code/qwen-code",
    command="qwen",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".qwen/settings.json", ".qwen/settings.json"),
        ConfigSource(".qwen/.env", ".qwen/.env"),
        ConfigSource(".qwen/QWEN.md", ".qwen/QWEN.md"),
        ConfigSource(".qwen/agents", ".qwen/agents"),
        ConfigSource(".qwen/commands", ".qwen/commands"),
        ConfigSource(".qwen/skills", ".qwen/skills"),
    ),
    credentials=(
        Credential("OPENAI_API_KEY", ("api.openai.com",), ("authorization",)),
        Credential("DASHSCOPE_API_KEY", ("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com"),
                   ("authorization",)),
    ),
    hosts=("api.openai.com", "dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com"),
    image_files=(("/etc/qwen-code/settings.json", SYSTEM_SETTINGS),),
    # The VM is the sandbox: a container of Qwen Code's own would need a container engine in the VM.
    environment=(("QWEN_SANDBOX", "false"),),
    checkout_config=ConfigSource("qwen-code", ".qwen"),
    logins=(".qwen/oauth_creds.json",),
)
