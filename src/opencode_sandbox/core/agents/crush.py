"""Crush (`@charmland/crush`), a terminal program in the VM's terminal session.

Its hooks fire before a tool call alone: nothing marks the end of a turn, so its session's
terminal output tells whether it works. The npm package holds no program: its install script
downloads Crush's release for the machine from GitHub and checks it against the digest the
package names.
"""

from __future__ import annotations

from opencode_sandbox.core.agents.profile import ActivitySource, AgentProfile, ConfigSource, Credential, SessionKind

_CONFIG_FOLDER = ".config/crush"

PROFILE = AgentProfile(
    name="crush",
    title="Crush",
    package="@charmland/crush",
    command="crush",
    session=SessionKind.TERMINAL,
    config=(
        *(ConfigSource(f"{_CONFIG_FOLDER}/{name}", f"{_CONFIG_FOLDER}/{name}")
          for name in ("crush.json", "crushrc", "CRUSH.md", "commands", "skills")),
        ConfigSource(".config/AGENTS.md", ".config/AGENTS.md"),
    ),
    credentials=(
        Credential("ANTHROPIC_API_KEY", ("api.anthropic.com",), ("x-api-key",)),
        Credential("OPENAI_API_KEY", ("api.openai.com",), ("authorization",)),
        Credential("GEMINI_API_KEY", ("generativelanguage.googleapis.com",), ("x-goog-api-key",)),
        Credential("OPENROUTER_API_KEY", ("openrouter.ai",), ("authorization",)),
        Credential("GROQ_API_KEY", ("api.groq.com",), ("authorization",)),
        Credential("HYPER_API_KEY", ("hyper.charm.land",), ("authorization",)),
    ),
    hosts=("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com", "openrouter.ai",
           "api.groq.com", "hyper.charm.land",
           # its catalogue of providers and models, refreshed at each start
           "catwalk.charm.land"),
    activity=ActivitySource.TERMINAL,
    checkout_config=ConfigSource("crush", _CONFIG_FOLDER),
    logins=(".local/share/crush",),
)
