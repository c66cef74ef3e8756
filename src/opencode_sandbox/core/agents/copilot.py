"""GitHub Copilot CLI (`@github/copilot`), a terminal program in the VM's terminal session.

Its hooks report each turn: a policy file of the image (`/etc/github-copilot/policy.d/`) holds them,
and Copilot runs them beside the user's own without asking. It signs in to GitHub (a token in
`COPILOT_GITHUB_TOKEN`, `GH_TOKEN` or `GITHUB_TOKEN`, or its device login), unless a provider of
the user's own is set in its `COPILOT_PROVIDER_*` environment.
"""

from __future__ import annotations

import json

from opencode_sandbox.core.agents.profile import AGENT_EVENT, AgentProfile, ConfigSource, Credential, SessionKind

_HOOKS = {
    "sessionStart": "idle",
    "userPromptSubmitted": "busy",
    "preToolUse": "busy",
    "postToolUse": "busy",
    # Not `permissionRequest`: it comes before every tool call, approved beforehand (`--allow-all`) or not.
    "notification": "asking",
    "agentStop": "waiting",
    "sessionEnd": "ended",
}
POLICY = json.dumps(
    {"version": 1,
     "hooks": {event: [{"type": "command", "bash": f"{AGENT_EVENT} {state}"}] for event, state in _HOOKS.items()}},
    indent=2,
) + "\n"
_GITHUB = ("api.github.com", "api.githubcopilot.com", "*.githubcopilot.com")

PROFILE = AgentProfile(
    name="copilot",
    title="GitHub Copilot CLI",
    package="@github/copilot",
    command="copilot",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".copilot/settings.json", ".copilot/settings.json"),
        ConfigSource(".copilot/mcp-config.json", ".copilot/mcp-config.json"),
        ConfigSource(".copilot/lsp-config.json", ".copilot/lsp-config.json"),
        ConfigSource(".copilot/copilot-instructions.md", ".copilot/copilot-instructions.md"),
        ConfigSource(".copilot/agents", ".copilot/agents"),
        ConfigSource(".copilot/skills", ".copilot/skills"),
        ConfigSource(".copilot/hooks", ".copilot/hooks"),
    ),
    credentials=tuple(Credential(variable, _GITHUB, ("authorization",))
                      for variable in ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")),
    hosts=("github.com", *_GITHUB),
    image_files=(("/etc/github-copilot/policy.d/opencode-sandbox.json", POLICY),),
    environment=(("COPILOT_AUTO_UPDATE", "false"),),
    checkout_config=ConfigSource("copilot", ".copilot"),
    logins=(".copilot/config.json",),
)
