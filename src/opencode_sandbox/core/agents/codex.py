"""Codex (`@openai/codex`), a terminal program in the VM's terminal session.

Its hooks report each turn: the image's system requirements (`/etc/codex/requirements.toml`)
hold them as managed hooks, which run beside the user's own without a review.
"""

from __future__ import annotations

from opencode_sandbox.core.agents.profile import AGENT_EVENT, AgentProfile, ConfigSource, Credential, SessionKind

_HOOKS = {
    "SessionStart": "idle",
    "UserPromptSubmit": "busy",
    "PreToolUse": "busy",
    "PostToolUse": "busy",
    "PermissionRequest": "asking",
    "Stop": "waiting",
}
REQUIREMENTS = "".join(
    f'[[hooks.{event}]]\n[[hooks.{event}.hooks]]\ntype = "command"\ncommand = "{AGENT_EVENT} {state}"\n\n'
    for event, state in _HOOKS.items()
)

PROFILE = AgentProfile(
    name="codex",
    title="Codex",
    package="@openai/codex",
    command="codex",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".codex/config.toml", ".codex/config.toml"),
        ConfigSource(".codex/AGENTS.md", ".codex/AGENTS.md"),
        ConfigSource(".codex/prompts", ".codex/prompts"),
        ConfigSource(".codex/skills", ".codex/skills"),
    ),
    credentials=(Credential("OPENAI_API_KEY", ("api.openai.com",), ("authorization",)),),
    hosts=("api.openai.com", "auth.openai.com", "chatgpt.com"),
    image_files=(("/etc/codex/requirements.toml", REQUIREMENTS),),
    # The VM is the sandbox: Codex's own (Landlock and seccomp inside the VM) would only stop its commands.
    default_arguments=("--sandbox", "danger-full-access"),
    checkout_config=ConfigSource("codex", ".codex"),
    logins=(".codex/auth.json",),
)
