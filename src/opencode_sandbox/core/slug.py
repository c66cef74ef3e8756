"""Project slugs: `<repo-name>-<hash>`, the same for every clone and worktree of a remote."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from opencode_sandbox.core.digest import sha256

HASH_LENGTH = 14
NAME_LENGTH = 20
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_SCP_LIKE = r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>(?!//).*)$"
_URL = r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?:[^@/]*@)?(?P<host>[^/:]*)(?::\d*)?(?P<path>/.*)?$"


def base36_hash(text: str) -> str:
    number = int.from_bytes(sha256(text.encode()).digest(), "big") % (36**HASH_LENGTH)
    digits = []
    for _ in range(HASH_LENGTH):
        number, remainder = divmod(number, 36)
        digits.append(_ALPHABET[remainder])
    return "".join(reversed(digits))


def normalize_remote(url: str) -> str:
    """`host:path` of a remote URL, without user name, scheme, port and `.git`.

    `git@github.com:inoio/myproject.git`, `https://github.com/inoio/myproject` and
    `ssh://git@github.com:22/inoio/myproject.git` all give `github.com:inoio/myproject`.
    A local path remote gives `:<path>`.
    """
    text = url.strip()
    match = re.match(_URL, text)
    if match:
        host = match.group("host").lower()
        path = match.group("path") or ""
    else:
        scp = re.match(_SCP_LIKE, text)
        if scp and "/" not in scp.group("host"):
            host, path = scp.group("host").lower(), scp.group("path")
        else:
            host, path = "", text
    path = path.strip("/")
    while path.endswith(".git") or path.endswith("/"):
        path = path.removesuffix(".git").rstrip("/")
    return f"{host}:{path}"


def name_part(text: str) -> str:
    """Lower-case, runs outside `[a-z0-9]` as `-`, at most 20 characters."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    cleaned = cleaned[:NAME_LENGTH].rstrip("-")
    return cleaned or "project"


def repo_name_from_remote(normalized: str) -> str:
    path = normalized.split(":", 1)[1]
    return PurePosixPath(path).name if path else ""


def slug_for_remote(url: str) -> str:
    normalized = normalize_remote(url)
    return f"{name_part(repo_name_from_remote(normalized))}-{base36_hash(normalized)}"


def slug_for_path(path: str) -> str:
    return f"{name_part(PurePosixPath(path).name)}-{base36_hash(path)}"
