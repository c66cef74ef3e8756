"""Cline (`cline`), a terminal program in the VM's terminal session.

Its hooks are files of the user's home or of the checkout, never of the image, so its terminal's
output tells the tool whether it works. Its provider, model and base URL are in
`~/.cline/data/settings/providers.json`; the key, left out of that copy, comes from the provider's
variable (an OpenAI-compatible provider reads `OPENAI_API_KEY`).
"""

from __future__ import annotations

from opencode_sandbox.core.agents.profile import ActivitySource, AgentProfile, ConfigSource, Credential, SessionKind

PROFILE = AgentProfile(
    name="cline",
    title="Cline",
    package="cline",
    command="cline",
    session=SessionKind.TERMINAL,
    config=(
        ConfigSource(".cline/data/settings/providers.json", ".cline/data/settings/providers.json"),
        ConfigSource(".cline/data/settings/cline_mcp_settings.json", ".cline/data/settings/cline_mcp_settings.json"),
        ConfigSource(".cline/rules", ".cline/rules"),
        ConfigSource(".cline/skills", ".cline/skills"),
        ConfigSource(".cline/workflows", ".cline/workflows"),
        ConfigSource(".cline/hooks", ".cline/hooks"),
        ConfigSource("Documents/Cline/Rules", "Documents/Cline/Rules"),
    ),
    credentials=(
        Credential("CLINE_API_KEY", ("api.cline.bot",), ("authorization",)),
        Credential("ANTHROPIC_API_KEY", ("api.anthropic.com",), ("x-api-key",)),
        Credential("OPENAI_API_KEY", ("api.openai.com",), ("authorization",)),
        Credential("OPENROUTER_API_KEY", ("openrouter.ai",), ("authorization",)),
    ),
    hosts=("api.cline.bot", "app.cline.bot", "api.anthropic.com", "api.openai.com", "openrouter.ai"),
    # Its notice offering a subscription would cover the interface at every start of a new home.
    environment=(("CLINE_NO_AUTO_UPDATE", "1"), ("CLINE_DISABLE_CLINE_PASS_NOTICE", "1")),
    activity=ActivitySource.TERMINAL,
    checkout_config=ConfigSource("cline", ".cline"),
    logins=(".cline/data/secrets.json",),
)
