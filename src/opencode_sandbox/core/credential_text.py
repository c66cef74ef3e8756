"""Credentials in text of any kind, found by their shape rather than by the name they are kept under:
a provider's key or webhook by its prefix (`sk-`, `ghp_`, `AIza`, `hooks.slack.com/services/`, a
JWT), a private key, a URL's password or a key as its user, a key in a URL's query, a bearer or basic
token, curl's `-u user:password`; in configuration files and scripts also a key in a URL's path, a
key-shaped value under a credential's name (`DD-API-KEY: <hex>`, `AZURE_OPENAI_API_KEY=<hex>`) and
any run of 20 letters and digits mixed as a random key is. A name can be missed
(`OPENAI_API_KEY_WORK`, a header line in a variable, a key in a shell command); the value's shape
stays. The screens of `core/agent_config.py` drop each text this finds, and every file copied into
the VM for a terminal agent is looked at once more: one that still holds such text stays on the host
whole.

Every pattern runs in time linear in the text: each repetition is bounded or cannot overlap the next.
What is found is described by its kind and line, never by its value."""

from __future__ import annotations

import re

CREDENTIAL = re.compile(
    r"(^|[_\-.])(api[_\-]?key|key|token|secret|password|passwd|pwd|pass|passphrase|credentials?|bearer[_\-]?token"
    r"|authorization|auth|pat|cookies?|jwt)$"
    r"|secret|password|passphrase|bearer",
    re.IGNORECASE,
)
"""A name that says its value is a credential: `GITHUB_TOKEN`, `api_key`, `experimental_bearer_token`,
`AWS_SECRET_ACCESS_KEY`, `Authorization`, `GH_PAT`, `MYSQL_PWD`, `SMTP_PASS`, `cookies`.
`MAX_THINKING_TOKENS` is none."""
SUFFIXED_CREDENTIAL = re.compile(r"(^|_)(API_KEY|KEY|TOKEN|SECRET|PASSWORD|PASS|PWD|PAT)_[A-Z0-9]{1,10}$")
"""A variable of a credential with a word after it, in capitals: `OPENAI_API_KEY_WORK`, `GEMINI_API_KEY_2`."""
CAMEL_CASE_CREDENTIAL = re.compile(r"[a-z0-9](ApiKey|Key|Token|Secret|Password|Passphrase|Credentials?|Cookies?|Pat"
                                   r"|Header)$")
"""A camel-case name that says the same: `accessToken`, `awsSecretKey`, `sessionCookie`, `githubPat`,
`authHeader`. `maxOutputTokens` is none."""

_AFTER = r"(?:(?<![A-Za-z0-9_\-])|(?<=\\[nrt]))"
"""Where a key may begin: not inside a word, or right after a JSON escape (`"...:\nsk-..."`)."""
KNOWN_KEY = re.compile(
    _AFTER + r"(?:"
    r"sk-[A-Za-z0-9_\-]{8,}|sk_[A-Za-z0-9_]{20,}|[rp]k_(?:live|test)_[A-Za-z0-9]{8,}|whsec_[A-Za-z0-9+/=]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposre]-[A-Za-z0-9.\-]{10,}|xapp-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{30,}|GOCSPX-[A-Za-z0-9_\-]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|ya29\.[0-9A-Za-z_\-]{20,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_\-]{30,}"
    r"|hf_[A-Za-z0-9]{30,}|gsk_[A-Za-z0-9]{30,}|xai-[A-Za-z0-9]{30,}|r8_[A-Za-z0-9]{30,}|tvly-[A-Za-z0-9\-]{20,}"
    r"|pplx-[A-Za-z0-9]{20,}|fc-[A-Za-z0-9]{20,}|fw_[A-Za-z0-9]{20,}|ntn_[A-Za-z0-9]{30,}|secret_[A-Za-z0-9]{30,}"
    r"|fk-[A-Za-z0-9_\-]{20,}|sbp_[A-Za-z0-9]{20,}|sntry[us]_[A-Za-z0-9+/=_]{20,}|lin_api_[A-Za-z0-9]{20,}"
    r"|SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"
    r"|hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/]{20,}"
    r"|discord(?:app)?\.com/api/webhooks/[0-9]{5,}/[A-Za-z0-9_\-]{20,}"
)
"""Keys whose prefix names their kind: OpenAI's, Anthropic's, DeepSeek's and OpenRouter's (`sk-`),
ElevenLabs' (`sk_`), Stripe's, GitHub's tokens, GitLab's, Slack's tokens and webhooks, Discord's
webhooks, Google's API keys, client secrets and access tokens, AWS access key IDs, npm's, PyPI's,
Hugging Face's, Groq's, xAI's, Replicate's, Tavily's, Perplexity's, Firecrawl's, Fireworks',
Notion's, Factory's, Supabase's, Sentry's, Linear's, SendGrid's, and any JWT."""
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
URL_CREDENTIALS = re.compile(
    r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,30}://([^\s/@:'\"<>]{1,256})(?::([^\s/@'\"<>]{0,256}))?@"
    r"([^\s/:'\"<>@]{0,253})")
"""A URL with a user part: `scheme://user:password@host`, or `https://TOKEN@host`."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0", "[", "host.docker.internal")
"""A password for a database on the machine itself (`postgres:postgres@localhost`) is an example, not a key."""
QUERY_CREDENTIAL = re.compile(
    r"[?&;](?:api[_\-]?key|apikey|key|token|access[_\-]?token|auth|secret|client[_\-]?secret|password|passwd|pwd)"
    r"=([^&\s\"'#<>]{1,256})", re.IGNORECASE)
BEARER = re.compile(r"(?<![A-Za-z0-9])(?:bearer|basic)\s{1,8}([A-Za-z0-9._~+/\-]{8,512}=*)", re.IGNORECASE)
CURL_USER = re.compile(r"(?<!\S)(?:-u|--user)[\s=]{1,4}['\"]?([^\s:'\"]{1,256}):([^\s'\"]{6,256})")
"""curl's `-u user:password` (Twilio's `-u ACCOUNT:TOKEN`)."""
NAMED_VALUE = re.compile(
    r"(?<![\w.\-])([A-Za-z_][\w.\-]{0,80})[\"']?\s{0,4}[:=]\s{0,4}[\"']?([^\s\"',;&:=<>(){}\[\]]{8,512}=*)")
"""`NAME=value`, `NAME: value` (a header line) or `"NAME": "value"`, judged by the name
(`is_credential`) and the value's shape (`_key_shaped`)."""
URL_PATH_KEY = re.compile(r"://[^\s/'\"<>]{1,253}/(?:[^\s/'\"<>?#]{1,64}/){0,8}([A-Za-z0-9_\-]{24,256})")
"""A key as a segment of a URL's path (Infura's `/v3/KEY`, Alchemy's `/v2/KEY`)."""
HEX_OR_UUID = re.compile(r"[0-9a-f]{32,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
RANDOM_RUN = re.compile(r"(?<![A-Za-z0-9+])[A-Za-z0-9]{20,}")
"""A run of letters and digits, judged by `_random`: a key made at random mixes all three kinds."""
NOT_A_KEY = re.compile(r"(?:sha(?:1|224|256|384|512)-|data:[\w.+\-/]{1,64};base64,)[A-Za-z0-9+/=]+")
"""An integrity digest in base64 (`sha512-...` in a lock file) and base64 data (`data:image/png;base64,`)
mix letters and digits too, and are none: they are read as blanks."""
REFERENCE = re.compile(r"^(?:\$|%|<|\{)")
"""A value that names where the key comes from (`$TOKEN`, `${TOKEN}`, `%TOKEN%`, `<your key>`,
`{env:TOKEN}`, a template's `{API_KEY}`), not the key."""
CONFIGURATION_SUFFIXES = (".json", ".jsonc", ".json5", ".toml", ".yaml", ".yml", ".env", ".ini", ".conf", ".cfg",
                          ".properties", "rc", ".sh", ".bash", ".zsh", ".fish")
"""Files whose text is configuration or a script, where a random run is looked for too: in code and
documents a run like it is common (base64 data), and a key there would be one a user pasted by hand."""


def _random(run: str) -> bool:
    return any(c.isdigit() for c in run) and sum(c.isupper() for c in run) >= 3 \
        and sum(c.islower() for c in run) >= 3


def _token(value: str) -> bool:
    """A bearer or basic credential rather than a word after `bearer` (`basic JavaScript`): a digit,
    base64's padding, or capitals and small letters mixed over 12 characters or more."""
    return any(c.isdigit() for c in value) or value.endswith("=") \
        or (len(value) >= 12 and sum(c.isupper() for c in value) >= 3 and sum(c.islower() for c in value) >= 3)


def _key_shaped(value: str) -> bool:
    """A value under a credential's name that is a key rather than a setting (`ctrl+shift+1`, a
    model's name): hexadecimal or a UUID, a random run, or 12 characters or more with two digits and
    two letters at least."""
    return bool(HEX_OR_UUID.fullmatch(value)) or _random(value) or (
        len(value) >= 12 and sum(c.isdigit() for c in value) >= 2 and sum(c.isalpha() for c in value) >= 2)


def is_credential(name: str, secret_names: frozenset[str] = frozenset()) -> bool:
    return name in secret_names or bool(CREDENTIAL.search(name)) or bool(CAMEL_CASE_CREDENTIAL.search(name)) \
        or bool(SUFFIXED_CREDENTIAL.search(name))


def _referenced(value: str) -> bool:
    return bool(REFERENCE.match(value))


def is_configuration(name: str) -> bool:
    """Whether a file of this name is configuration text (`.env`, `settings.json`, `crushrc`)."""
    lowered = name.lower().rsplit("/", 1)[-1]
    return lowered.endswith(CONFIGURATION_SUFFIXES) or lowered.startswith(".env") or "." not in lowered.lstrip(".")


def credential_in(text: str, configuration: bool = True) -> str | None:
    """The kind of the first credential found in `text`, None when there is none. `configuration`:
    look for a random run, and for a key-shaped value under a credential's name, too."""
    found = credential_at(text, configuration)
    return found[0] if found is not None else None


def credential_at(text: str, configuration: bool = True) -> tuple[str, int] | None:
    """`credential_in`, with where in `text` the credential begins."""
    if (match := KNOWN_KEY.search(text)) is not None:
        return "a provider's key", match.start()
    if (match := PRIVATE_KEY.search(text)) is not None:
        return "a private key", match.start()
    for match in URL_CREDENTIALS.finditer(text):
        user, password, host = match.group(1), match.group(2), match.group(3).lower()
        if host.startswith(LOCAL_HOSTS) or password == user:
            continue
        if password and not _referenced(password):
            return "a password in a URL", match.start()
        if len(user) >= 16 and any(c.isdigit() for c in user) and not _referenced(user):
            return "a key as a URL's user", match.start()
    for match in QUERY_CREDENTIAL.finditer(text):
        if len(match.group(1)) >= 6 and not _referenced(match.group(1)):
            return "a key in a URL's query", match.start()
    for match in BEARER.finditer(text):
        if _token(match.group(1)):
            return "a bearer token", match.start()
    for match in CURL_USER.finditer(text):
        if not _referenced(match.group(2)):
            return "a password after -u", match.start()
    if not configuration:
        return None
    text = NOT_A_KEY.sub(lambda match: " " * len(match.group()), text)

    for match in URL_PATH_KEY.finditer(text):
        segment = match.group(1)
        if HEX_OR_UUID.fullmatch(segment) or _random(segment.replace("-", "").replace("_", "")):
            return "a key in a URL's path", match.start(1)
    for match in NAMED_VALUE.finditer(text):
        name, value = match.group(1), match.group(2)
        if not _referenced(value) and _key_shaped(value) and is_credential(name.strip("-").replace("-", "_")):
            return "a key under a credential's name", match.start()
    for match in RANDOM_RUN.finditer(text):
        if _random(match.group()):
            return "a key-shaped value", match.start()
    return None


def credential_line(text: str, configuration: bool = True) -> str | None:
    """`credential_in` over a whole file, with the line it is on: `a bearer token, line 3`."""
    found = credential_at(text, configuration)
    if found is None:
        return None
    kind, where = found
    return f"{kind}, line {text.count(chr(10), 0, where) + 1}"


def texts_of(data: bytes) -> list[str]:
    """The file as every reader may read it: bytes as they are, and UTF-16 where it has a byte order
    mark or NUL bytes (`GEMINI_API_KEY=...` saved as UTF-16 by an editor)."""
    texts = [data.decode("latin-1")]
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:4096]:
        texts += [data.decode("utf-16-le", errors="ignore"), data.decode("utf-16-be", errors="ignore")]
    return texts


COMPRESSED = (b"\x1f\x8b", b"PK\x03\x04", b"\xfd7zXZ\x00", b"BZh", b"\x28\xb5\x2f\xfd", b"SQLite format 3\x00")
"""gzip, zip, xz, bzip2, zstd, SQLite: what they hold cannot be looked at as text."""
