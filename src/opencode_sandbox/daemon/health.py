"""The daemon health check of the warm start path, on the standard library alone.

Every start asks whether `opencode serve` answers; httpx would add more import time to
that question than the whole answer takes, so this one request uses http.client.
"""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlsplit

from opencode_sandbox.daemon.answers import read_health
from opencode_sandbox.daemon.errors import DaemonError

HEALTH_PATH = "/global/health"


def is_serving(base_url: str, password: str, timeout_s: float = 2.0) -> bool:
    """True when an opencode daemon answers healthy at `base_url` with this password."""
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    token = base64.b64encode(f"opencode:{password}".encode()).decode()
    try:
        connection.request("GET", HEALTH_PATH, headers={"Authorization": f"Basic {token}"})
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            return False
        read_health(json.loads(body))
    except (OSError, ValueError, http.client.HTTPException, DaemonError):
        return False
    finally:
        connection.close()
    return True
