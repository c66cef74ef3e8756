"""Credentials in text of any kind, found by their shape rather than by the name they are kept under:
a provider's key by its prefix (`sk-`, `ghp_`, `AIza`, a JWT), a private key, a URL's password or a
key as its user, a key in a URL's query, a bearer token, and, in configuration files, any run of 20
letters and digits mixed as a random key is. A name can be missed (`OPENAI_API_KEY_WORK`, a header
line in a variable, a key in a shell command); the value's shape stays. The screens of
`core/agent_config.py` drop each text this finds, and every file copied into the VM for a terminal
agent is looked at once more: one that still holds such text stays on the host whole.

Every pattern runs in time linear in the text: each repetition is bounded or cannot overlap the next.
What is found is described by its kind and line, never by its value."""

from __future__ import annotations

import re

KNOWN_KEY = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{8,}|sk_(?:live|test)_[A-Za-z0-9]{8,}|[rp]k_live_[A-Za-z0-9]{8,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{30,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|ya29\.[0-9A-Za-z_\-]{20,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_\-]{30,}|hf_[A-Za-z0-9]{30,}"
    r"|gsk_[A-Za-z0-9]{30,}|xai-[A-Za-z0-9]{30,}|r8_[A-Za-z0-9]{30,}|tvly-[A-Za-z0-9\-]{20,}"
    r"|ntn_[A-Za-z0-9]{30,}|secret_[A-Za-z0-9]{30,}|fk-[A-Za-z0-9_\-]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"
)
"""Keys whose prefix names their kind: OpenAI's, Anthropic's and DeepSeek's (`sk-`), Stripe's, GitHub's
tokens, GitLab's, Slack's, Google's API keys and access tokens, AWS access key IDs, npm's, PyPI's,
Hugging Face's, Groq's, xAI's, Replicate's, Tavily's, Notion's, Factory's, and any JWT."""
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
URL_CREDENTIALS = re.compile(
    r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,30}://([^\s/@:'\"<>]{1,256})(?::([^\s/@'\"<>]{0,256}))?@")
"""A URL with a user part: `scheme://user:password@host`, or `https://TOKEN@host`."""
QUERY_CREDENTIAL = re.compile(
    r"[?&;](?:api[_\-]?key|apikey|key|token|access[_\-]?token|auth|secret|client[_\-]?secret|password|passwd|pwd)"
    r"=([^&\s\"'#<>]{1,256})", re.IGNORECASE)
BEARER = re.compile(r"(?<![A-Za-z0-9])(?:bearer|basic)\s{1,8}([A-Za-z0-9._~+/\-]{8,512}=*)", re.IGNORECASE)
RANDOM_RUN = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9]{20,}")
"""A run of letters and digits, judged by `_random`: a key made at random mixes all three kinds."""
DIGEST_PREFIX = re.compile(r"sha(?:1|224|256|384|512)-$")
"""An integrity digest in base64 (`sha512-...` in a lock file) mixes them too, and is none."""
REFERENCE = re.compile(r"^(?:\$|%|<|\{\{?\s*env|\{env:)")
"""A value that names where the key comes from (`$TOKEN`, `${TOKEN}`, `%TOKEN%`, `<your key>`,
`{env:TOKEN}`), not the key."""
CONFIGURATION_SUFFIXES = (".json", ".jsonc", ".json5", ".toml", ".yaml", ".yml", ".env", ".ini", ".conf", ".cfg",
                          ".properties", "rc", ".sh", ".bash", ".zsh", ".fish")
"""Files whose text is configuration or a script, where a random run is looked for too: in code and
documents a run like it is common (base64 data), and a key there would be one a user pasted by hand."""


def _random(run: str) -> bool:
    return sum(c.isdigit() for c in run) >= 2 and sum(c.isupper() for c in run) >= 3 \
        and sum(c.islower() for c in run) >= 3


def _token(value: str) -> bool:
    """A bearer or basic credential rather than a word after `bearer`: a digit, capitals and small
    letters mixed (base64), or base64's padding."""
    return any(c.isdigit() for c in value) or value.endswith("=") \
        or (sum(c.isupper() for c in value) >= 2 and sum(c.islower() for c in value) >= 2)


def _referenced(value: str) -> bool:
    return bool(REFERENCE.match(value))


def is_configuration(name: str) -> bool:
    """Whether a file of this name is configuration text (`.env`, `settings.json`, `crushrc`)."""
    lowered = name.lower().rsplit("/", 1)[-1]
    return lowered.endswith(CONFIGURATION_SUFFIXES) or lowered.startswith(".env") or "." not in lowered.lstrip(".")


def credential_in(text: str, configuration: bool = True) -> str | None:
    """The kind of the first credential found in `text`, None when there is none. `configuration`:
    look for a random run too (`CONFIGURATION_SUFFIXES`)."""
    if KNOWN_KEY.search(text):
        return "a provider's key"
    if PRIVATE_KEY.search(text):
        return "a private key"
    for match in URL_CREDENTIALS.finditer(text):
        user, password = match.group(1), match.group(2)
        if password and not _referenced(password):
            return "a password in a URL"
        if len(user) >= 16 and any(c.isdigit() for c in user) and not _referenced(user):
            return "a key as a URL's user"
    for match in QUERY_CREDENTIAL.finditer(text):
        if len(match.group(1)) >= 6 and not _referenced(match.group(1)):
            return "a key in a URL's query"
    for match in BEARER.finditer(text):
        if _token(match.group(1)):
            return "a bearer token"
    if configuration:
        for match in RANDOM_RUN.finditer(text):
            if _random(match.group()) and not DIGEST_PREFIX.search(text, max(0, match.start() - 7), match.start()):
                return "a key-shaped value"
    return None


def credential_line(text: str, configuration: bool = True) -> str | None:
    """`credential_in` over a whole file, with the line it is on: `a bearer token, line 3`."""
    for number, line in enumerate(text.splitlines(), start=1):
        kind = credential_in(line, configuration)
        if kind is not None:
            return f"{kind}, line {number}"
    return None
