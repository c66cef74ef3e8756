"""Whether every name a proxied request gives for its server is the same one, so the policy judges,
and a secret goes to, the server the request really reaches. On a shared front (a CDN, a cloud
load balancer) one address serves many sites: a client could open its connection to a host the
policy allows, then name another site in TLS (SNI) or in the `Host` header, and the front would
hand the request, and the secret put into it, to that site. Pure: the proxy's addon calls it."""

from __future__ import annotations

import ipaddress


def _name(text: str) -> str:
    return text.strip().lower().rstrip(".")


def host_of_authority(authority: str) -> str:
    """The host part of a `Host` header or `:authority`: `[::1]:8080` -> `::1`, `a.b:443` -> `a.b`."""
    text = authority.strip()
    if text.startswith("["):
        return _name(text[1:text.find("]")] if "]" in text else text[1:])
    if text.count(":") == 1:
        text = text.rsplit(":", 1)[0]
    return _name(text)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def disagreement(host: str, host_header: str | None, client_sni: str | None, server_sni: str | None,
                 tls: bool) -> str | None:
    """Why the names differ, or None when they agree. `host`: where the connection goes (the
    CONNECT target, or a plain request's URL); `server_sni`: the name the upstream certificate was
    checked for; `tls`: the request travels in TLS to the server."""
    target = _name(host)
    if client_sni and _name(client_sni) != target:
        return f"the TLS name (SNI) {_name(client_sni)} is not {target}, where the connection goes"
    if tls:
        checked = _name(server_sni) if server_sni else None
        if checked != target and not (checked is None and _is_address(target)):
            return f"the server's certificate was checked for {checked or 'no name'}, not for {target}"
    if host_header and host_of_authority(host_header) != target:
        return f"the Host header names {host_of_authority(host_header)}, not {target}, where the connection goes"
    return None


def port_of_authority(authority: str) -> int | None:
    """The port an authority names, None when it names none (or none that reads)."""
    text = authority.strip()
    tail = text[text.find("]") + 1:] if text.startswith("[") else text
    if tail.count(":") != 1:
        return None
    port = tail.rsplit(":", 1)[1]
    return int(port) if port.isdigit() else None


def target_disagreement(authority: str, host: str, port: int) -> str | None:
    """Why the request target's own authority (an absolute-form target, HTTP/2's `:authority`)
    names another server than where the connection goes, or None when it names the same one or
    none. A server takes its host from the target before the `Host` header (RFC 9112, 3.2.2), so
    a request in a tunnel to an allowed host must not name another one there."""
    if not authority.strip():
        return None
    named, target = host_of_authority(authority), _name(host)
    if named != target:
        return f"the request target names {named}, not {target}, where the connection goes"
    named_port = port_of_authority(authority)
    if named_port is not None and named_port != port:
        return f"the request target names port {named_port}, not {port}, where the connection goes"
    return None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def judged_authority(host: str, port: int, scheme: str) -> str:
    """The authority of the server the policy judged (`host`, `port`), as a `Host` header or
    HTTP/2's `:authority` names it; the port is left out where it is the scheme's own. Sent in
    place of whatever the request named, so a front that cannot read the request's own spelling
    (`[api.example]`, a trailing dot, none at all) serves the judged site, never its default one."""
    name = _name(host)
    shown = f"[{name}]" if ":" in name else name
    return shown if _DEFAULT_PORTS.get(scheme) == port else f"{shown}:{port}"
