"""The files of the user's agent configuration that `core/agent_config.py` screens for credentials
before a copy into the VM, by their place under the home folder. Apart from the screens, so a start
that copies none of them need not load the screens and their patterns."""

from __future__ import annotations

CLAUDE_SETTINGS = ".claude/settings.json"
CODEX_CONFIG = ".codex/config.toml"
GEMINI_SETTINGS = ".gemini/settings.json"
GEMINI_ENV = ".gemini/.env"
QWEN_SETTINGS = ".qwen/settings.json"
QWEN_ENV = ".qwen/.env"
PI_SETTINGS = ".pi/agent/settings.json"
PI_MODELS = ".pi/agent/models.json"
CRUSH_CONFIG = ".config/crush/crush.json"
CRUSH_RC = ".config/crush/crushrc"
JSON_CONFIGS = (
    ".factory/settings.json", ".factory/mcp.json",
    ".cline/data/settings/providers.json", ".cline/data/settings/cline_mcp_settings.json",
    ".copilot/settings.json", ".copilot/mcp-config.json", ".copilot/lsp-config.json",
)
"""Droid's, Cline's and Copilot's JSON files that can hold a credential, screened as Claude Code's settings are."""

SCREENED = frozenset({CLAUDE_SETTINGS, CODEX_CONFIG, GEMINI_SETTINGS, GEMINI_ENV, QWEN_SETTINGS, QWEN_ENV, PI_SETTINGS,
                      PI_MODELS, CRUSH_CONFIG, CRUSH_RC, *JSON_CONFIGS})
"""Every file with a screen of its own (`agent_config.SCREENS`)."""
