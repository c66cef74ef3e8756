"""The mitmproxy addon of the docker runtime's egress proxy. It runs inside the proxy container
(`docker_proxy` copies it there, with `core/egress.py`), never in this tool's own process.

Every CONNECT and every plain or decrypted request is judged by `EgressPolicy.judge_resolved`,
after every name it gives for its server agrees (`core/request_names.py`: the connection's target,
SNI, the certificate checked, `Host`, and the request target's own authority, absolute-form or
HTTP/2's `:authority`); a request then goes on naming the judged server alone (origin form and
`Host` in HTTP/1, `:authority` in HTTP/2), so the server cannot take its host from anything else.
the same decision the rest of the tool makes: a refused one gets an HTTP 403 at once, whose JSON
body names the policy, and one JSON line on the proxy's output (its `docker logs`).

The policy arrives as JSON in `OPENCODE_SANDBOX_EGRESS_POLICY` (its secrets' names and hosts,
never their values). The values arrive after every start through `docker exec -i` into the tmpfs
`RUN_DIR`, which only the proxy's user can read; every request the policy lets through then has
its placeholders replaced or is refused (`core/secret_substitution.py`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import sys
import time
from typing import Any

from mitmproxy import http, tcp

from opencode_sandbox.core.egress import EgressPolicy, IpAddress, address_of
from opencode_sandbox.core.policy_document import policy_of_document
from opencode_sandbox.core.request_names import disagreement, judged_authority, target_disagreement
from opencode_sandbox.core.secret_substitution import substitute

POLICY_VARIABLE = "OPENCODE_SANDBOX_EGRESS_POLICY"
RUN_DIR = "/run/opencode-sandbox"
"""A tmpfs of the proxy's user, for what the proxy is told at run time."""
SECRET_VALUES_FILE = RUN_DIR + "/secret-values.json"
CLIENTS_FILE = RUN_DIR + "/clients.json"
RESOLVE_TIMEOUT_S = 10.0


class EgressPolicyAddon:
    def __init__(self, document: dict[str, Any]) -> None:
        self.policy: EgressPolicy = policy_of_document(document)
        self.host_addresses: frozenset[IpAddress] = frozenset(
            ipaddress.ip_address(text) for text in document.get("host_addresses", []))

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        if self._from_its_vm(flow):
            await self._judge(flow)

    async def request(self, flow: http.HTTPFlow) -> None:
        if not self._from_its_vm(flow):
            return
        request = flow.request
        fronted = (disagreement(request.host, request.host_header, flow.client_conn.sni, flow.server_conn.sni,
                                request.scheme == "https")
                   or target_disagreement(request.authority, request.host, request.port))
        if fronted is not None:
            _refuse(flow, request.host, request.port, fronted, "names_disagree")
            return
        # The server learns its host only from what was judged: in HTTP/1 the target goes in origin
        # form and `Host` names the judged server, in HTTP/2 `:authority` does and no `host` field.
        judged = judged_authority(request.host, request.port, request.scheme)
        if request.http_version.startswith("HTTP/2"):
            request.authority = judged
            request.headers.set_all("host", [])
        else:
            request.authority = ""
            request.headers.set_all("host", [judged])
        if flow.response is None:
            await self._judge(flow)
        if flow.response is None and self.policy.secrets:
            self._put_secrets(flow)

    def _from_its_vm(self, flow: http.HTTPFlow) -> bool:
        """Whether the client is the VM the proxy serves; anyone else gets a 403."""
        client = _client_address(flow.client_conn.peername)
        if client is not None and client in _clients():
            return True
        _refuse(flow, flow.request.host, flow.request.port,
                f"this proxy serves its own VM only, not {client or 'an unknown address'}", "not_its_vm")
        return False

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        """A stream the proxy cannot read as HTTP, in a tunnel: cut. Its bytes could still be a
        request to another site for a front that reads them more leniently (`\r\nGET ...`), and
        no name in it can be judged."""
        address = flow.server_conn.address
        host, port = (str(address[0]), int(address[1])) if address is not None else ("?", 0)
        _log_refusal(host, port, "a stream that is not HTTP: the proxy passes HTTP and HTTPS only")
        flow.kill()

    def _put_secrets(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        fields = [(str(field), str(value)) for field, value in request.headers.items(multi=True)]
        body = (request.get_content(strict=False) or b"").decode(errors="replace")
        outcome = substitute(self.policy.secrets, _secret_values(), request.host, request.port,
                             request.scheme == "https", fields, (request.url, body))
        if outcome.refusal is not None:
            _refuse(flow, request.host, request.port, outcome.refusal, "secret_policy_denied")
            return
        changed = {name.lower() for (name, value), before in zip(outcome.headers, fields, strict=True)
                   if value != before[1]}
        for field in changed:  # the others keep their spelling and place
            request.headers.set_all(field, [value for name, value in outcome.headers if name.lower() == field])

    async def _judge(self, flow: http.HTTPFlow) -> None:
        host, port = flow.request.host, flow.request.port
        verdict = self.policy.judge(host, address_of(host), port, self.host_addresses)
        if verdict.allowed:
            verdict = self.policy.judge_resolved(host, await _resolve(host, port), port, self.host_addresses)
        if not verdict.allowed:
            _refuse(flow, host, port, verdict.reason)


def _client_address(peername: Any) -> IpAddress | None:
    try:
        address = ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
    except (TypeError, IndexError, ValueError):
        return None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address


def _clients() -> frozenset[IpAddress]:
    """The addresses the runtime gave after the VM's last start; none before it gave any."""
    try:
        with open(CLIENTS_FILE, encoding="utf-8") as given:
            listed = json.load(given)
        return frozenset(ipaddress.ip_address(str(item)) for item in listed)
    except (OSError, ValueError, TypeError):
        return frozenset()


def _secret_values() -> dict[str, str]:
    """The values the runtime gave at the proxy's last start; none before it gave any."""
    try:
        with open(SECRET_VALUES_FILE, encoding="utf-8") as given:
            values = json.load(given)
    except (OSError, ValueError):
        return {}
    return {str(name): str(value) for name, value in values.items()} if isinstance(values, dict) else {}


async def _resolve(host: str, port: int) -> list[IpAddress]:
    """The addresses `host` resolves to; none when it does not (the connection then fails upstream)."""
    literal = address_of(host)
    if literal is not None:
        return [literal]
    try:
        found = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
    except (TimeoutError, OSError):
        return []
    return [ipaddress.ip_address(str(entry[4][0]).split("%", 1)[0]) for entry in found]


def _refuse(flow: http.HTTPFlow, host: str, port: int, reason: str, error: str = "network_policy_denied") -> None:
    message = f"opencode-sandbox network policy: {host}:{port} is not allowed ({reason})"
    body = {"error": error, "host": host, "port": port, "reason": reason, "message": message}
    flow.response = http.Response.make(403, json.dumps(body) + "\n", {
        "Content-Type": "application/json", "Connection": "close", "Cache-Control": "no-store",
        "X-Opencode-Sandbox-Policy": "denied",
    })
    _log_refusal(host, port, reason)


def _log_refusal(host: str, port: int, reason: str) -> None:
    line = {"t": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": "denied", "host": host,
            "port": port, "reason": reason}
    print(json.dumps(line), file=sys.stdout, flush=True)


addons = [EgressPolicyAddon(json.loads(os.environ.get(POLICY_VARIABLE, "{}")))]
