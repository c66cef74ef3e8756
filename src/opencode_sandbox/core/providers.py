"""Model providers whose API keys can be secrets, and opencode's stored logins (`auth.json`).

opencode keeps a provider's login in `~/.local/share/opencode/auth.json`: `{"openai": {"type":
"api", "key": "..."}, "anthropic": {"type": "oauth", "refresh": "...", ...}}`. An `api` entry is a
plain key that the provider also reads from an environment variable, so it can be a secret; an
`oauth` entry is refreshed by opencode itself and cannot.
"""

from __future__ import annotations

from collections.abc import Mapping

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from typing import Any


class Provider(Record):
    variable: str
    """The environment variable opencode reads the key from."""
    hosts: tuple[str, ...]
    headers: tuple[str, ...]
    """The request headers the provider's client sends the key in."""


PROVIDERS: Mapping[str, Provider] = {
    "openai": Provider("OPENAI_API_KEY", ("api.openai.com",), ("authorization",)),
    "anthropic": Provider("ANTHROPIC_API_KEY", ("api.anthropic.com",), ("x-api-key",)),
    "google": Provider("GOOGLE_GENERATIVE_AI_API_KEY", ("generativelanguage.googleapis.com",), ("x-goog-api-key",)),
    "groq": Provider("GROQ_API_KEY", ("api.groq.com",), ("authorization",)),
    "mistral": Provider("MISTRAL_API_KEY", ("api.mistral.ai",), ("authorization",)),
    "openrouter": Provider("OPENROUTER_API_KEY", ("openrouter.ai",), ("authorization",)),
    "deepseek": Provider("DEEPSEEK_API_KEY", ("api.deepseek.com",), ("authorization",)),
    "xai": Provider("XAI_API_KEY", ("api.x.ai",), ("authorization",)),
}
"""opencode's provider id -> how its key becomes a secret. Only providers whose key, variable
and hosts are known; any other is listed to the user, never guessed."""


class AuthEntry(Record):
    provider: str
    kind: str
    """`api`, `oauth`, or whatever else opencode writes."""
    key: str = ""
    """The API key of an `api` entry."""


def auth_entries(document: Any) -> list[AuthEntry]:
    """The logins in a parsed `auth.json`; ValueError when it is not opencode's shape."""
    if not isinstance(document, Mapping):
        raise ValueError("expected a JSON object of provider logins")
    entries = []
    for provider, entry in document.items():
        if not isinstance(entry, Mapping):
            continue
        kind = str(entry.get("type", ""))
        key = entry.get("key")
        entries.append(AuthEntry(str(provider), kind, key if kind == "api" and isinstance(key, str) else ""))
    return entries


def providers_kept_out(secret_names: set[str]) -> set[str]:
    """The providers whose key is a configured secret: their `api` logins stay on the host."""
    return {provider for provider, known in PROVIDERS.items() if known.variable in secret_names}


def without_kept_out_keys(document: Any, secret_names: set[str]) -> Any:
    """`auth.json` without the `api` logins of providers whose key is a secret (the same object
    when nothing is left out). OAuth logins stay: they cannot be secrets."""
    if not isinstance(document, Mapping):
        return document
    kept_out = providers_kept_out(secret_names)
    kept = {provider: entry for provider, entry in document.items()
            if not (provider in kept_out and isinstance(entry, Mapping) and entry.get("type") == "api")}
    return document if len(kept) == len(document) else kept
