"""The daemon health check of the warm start path, on a plain socket.

Every start asks whether `opencode serve` answers; httpx would add more import time to
that question than the whole answer takes, so this one request is a plain HTTP GET.
"""

from __future__ import annotations

import binascii
import json
from urllib.parse import urlsplit

from opencode_sandbox import plain_http

HEALTH_PATH = "/global/health"


def is_serving(base_url: str, password: str, timeout_s: float = 2.0) -> bool:
    """True when an opencode daemon answers healthy at `base_url` with this password."""
    parts = urlsplit(base_url)
    token = binascii.b2a_base64(f"opencode:{password}".encode(), newline=False).decode()
    try:
        status, body = plain_http.tcp_get(
            parts.hostname or "127.0.0.1", parts.port or 80, HEALTH_PATH, {"Authorization": f"Basic {token}"}, timeout_s
        )
        if status != 200:
            return False
        answer = json.loads(body)
    except (OSError, ValueError):
        return False
    return isinstance(answer, dict) and answer.get("healthy") is True
