"""The docker runtime's egress proxy: one mitmproxy container per project, for the policies that
name hosts (`allowlist`, or a rule with a host name), which nftables cannot judge.

The proxy runs on the project's network, from an image this tool builds from Debian with
mitmproxy from PyPI (Debian trixie does not package it) and the addon `proxy_addon.py`, which
judges every request with `core/egress.py`, copied beside it. It runs without capabilities, on
a read-only root, as a user of its own; its own network namespace gets `proxy_side_policy`, so
an allowed name that resolves to a private address stays out of reach. Its CA lives in a volume
of the project, so a recreated proxy keeps the VM's trust.

The VM reaches the proxy by the name `PROXY_HOST` in its `/etc/hosts` (it resolves nothing
itself) and trusts the proxy's CA: the CA is appended to the system bundle, which the runner
image's `NODE_EXTRA_CA_CERTS` names, and placed where `update-ca-certificates` finds it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.egress import EgressPolicy, IpAddress
from opencode_sandbox.core.naming import (
    KIND_PROXY,
    LABEL_CONTENT_HASH,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER_UID,
    LABEL_PREFIX,
    LABEL_SLUG,
    PROXY_REPOSITORY,
    TOOL,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.engine.command import DockerCli, DockerFailed, first_line
from opencode_sandbox.errors import BootFailed, OwnedByAnother
from opencode_sandbox.runtime.docker import netfilter as docker_netfilter
from opencode_sandbox.runtime.docker.args import label_args
from opencode_sandbox.runtime.docker.nft_ruleset import PROXY_PORT, proxy_side_policy
from opencode_sandbox.runtime.types import Refusal, SandboxStatus

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.engine.docker import DockerImageEngine
    from opencode_sandbox.runtime.docker.owner import DockerOwner

PROXY_BASE = "debian:trixie-slim"
MITMPROXY_VERSION = "12.3.1"
PROXY_HOST = f"{TOOL}-proxy"
"""The name the VM reaches its proxy by, from its `/etc/hosts`."""
PROXY_UID = 10080
CONFDIR = "/var/lib/mitmproxy"
RUN_DIR = "/run/opencode-sandbox"
SECRET_VALUES_FILE = RUN_DIR + "/secret-values.json"
CLIENTS_FILE = RUN_DIR + "/clients.json"
"""The addresses the proxy serves: its VM's, given after every start of the VM."""
LIB_DIR = "/opt/opencode-sandbox/lib"
LABEL_PROXY_CONFIG = LABEL_PREFIX + "proxy-config"
LABEL_PROXY_IMAGE = LABEL_PREFIX + "proxy-image"
CA_VOLUME_KIND = "proxy-ca"
"""The `kind` label of the volume that keeps a project's proxy CA."""
POLICY_VARIABLE = "OPENCODE_SANDBOX_EGRESS_POLICY"
READY_TIMEOUT_S = 60.0
VM_CA_FILE = "/usr/local/share/ca-certificates/opencode-sandbox-proxy.crt"
VM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

DOCKERFILE = f"""FROM {PROXY_BASE}
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv \\
 && rm -rf /var/lib/apt/lists/*
COPY ca-certificates/ /usr/local/share/ca-certificates/opencode-sandbox/
RUN update-ca-certificates
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/mitmproxy && /opt/mitmproxy/bin/pip install "mitmproxy=={MITMPROXY_VERSION}" \\
 && /opt/mitmproxy/bin/mitmdump --version
RUN useradd --uid {PROXY_UID} --user-group --home-dir {CONFDIR} --no-create-home --shell /usr/sbin/nologin mitmproxy \
 && install -d -m 0700 -o mitmproxy -g mitmproxy {CONFDIR}
COPY lib/ {LIB_DIR}/
ENV PYTHONPATH={LIB_DIR} PYTHONDONTWRITEBYTECODE=1
USER mitmproxy
ENTRYPOINT ["/opt/mitmproxy/bin/mitmdump"]
"""
_PACKAGE = Path(__file__).resolve().parents[2]
_LIBRARY = {  # the addon and the pure modules it imports, as the image holds them
    "proxy_addon.py": _PACKAGE / "runtime" / "docker" / "proxy_addon.py",
    "opencode_sandbox/core/egress.py": _PACKAGE / "core" / "egress.py",
    "opencode_sandbox/core/records.py": _PACKAGE / "core" / "records.py",
    "opencode_sandbox/core/secrets.py": _PACKAGE / "core" / "secrets.py",
    "opencode_sandbox/core/policy_document.py": _PACKAGE / "core" / "policy_document.py",
    "opencode_sandbox/core/secret_substitution.py": _PACKAGE / "core" / "secret_substitution.py",
    "opencode_sandbox/core/request_names.py": _PACKAGE / "core" / "request_names.py",
}
_PACKAGE_INIT = b"TYPE_CHECKING = False\n"
_READY_SCRIPT = f"""
import socket, sys, time
deadline = time.monotonic() + {READY_TIMEOUT_S}
while True:
    try:
        socket.create_connection(("127.0.0.1", {PROXY_PORT}), timeout=1).close()
        sys.stdout.write(open("{CONFDIR}/mitmproxy-ca-cert.pem").read())
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the proxy did not listen on port {PROXY_PORT}")
        time.sleep(0.2)
"""
_GIVE_SCRIPT = f"""
import os, sys
target = {{"values": "{SECRET_VALUES_FILE}", "clients": "{CLIENTS_FILE}"}}[sys.argv[1]]
data = sys.stdin.buffer.read()
part = target + ".new"
descriptor = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(descriptor, "wb") as out:
    out.write(data)
os.replace(part, target)
"""
_TRUST_SCRIPT = f"""set -e
ca=$(cat)
mkdir -p "$(dirname {VM_CA_FILE})"
printf '%s\\n' "$ca" > {VM_CA_FILE}
last=$(printf '%s\\n' "$ca" | grep -v -- '-----' | tail -n 1)
grep -qxF -- "$last" {VM_CA_BUNDLE} 2>/dev/null || printf '%s\\n' "$ca" >> {VM_CA_BUNDLE}
if ! grep -qE "^$1[[:space:]]+{PROXY_HOST}\\$" /etc/hosts; then
  others=$(grep -vE "[[:space:]]{PROXY_HOST}\\$" /etc/hosts || true)
  printf '%s\\n%s\\t%s\\n' "$others" "$1" {PROXY_HOST} > /etc/hosts
fi
"""


class ProxyEndpoint(Record):
    """A running proxy: where the VM reaches it, and the CA it signs its connections with."""

    address: IpAddress
    ca_pem: bytes
    name: str
    network: str


def proxy_name(slug: str) -> str:
    return f"{TOOL}-proxy-{slug}"


def ca_volume_name(slug: str) -> str:
    return f"{TOOL}-proxy-ca-{slug}"


def proxy_environment() -> dict[str, str]:
    """What the VM's programs need to send their traffic through the proxy (both spellings:
    curl reads only the lower-case `http_proxy`, Node's own fetch only with NODE_USE_ENV_PROXY)."""
    url = f"http://{PROXY_HOST}:{PROXY_PORT}"
    no_proxy = "localhost,127.0.0.1"
    return {"HTTPS_PROXY": url, "HTTP_PROXY": url, "https_proxy": url, "http_proxy": url,
            "NO_PROXY": no_proxy, "no_proxy": no_proxy, "NODE_USE_ENV_PROXY": "1"}


def proxy_policy_document(policy: EgressPolicy, host_addresses: Iterable[IpAddress]) -> str:
    """The addon's policy: the VM's policy and the host's own public addresses; no secret."""
    document = {**policy.document(), "host_addresses": sorted(str(address) for address in host_addresses)}
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def image_files(certificates: Sequence[bytes]) -> dict[str, bytes]:
    """The proxy image's build context, by path."""
    files = {"Dockerfile": DOCKERFILE.encode(), "lib/opencode_sandbox/__init__.py": _PACKAGE_INIT,
             "lib/opencode_sandbox/core/__init__.py": b""}
    files.update({f"lib/{target}": source.read_bytes() for target, source in _LIBRARY.items()})
    for pem in sorted(set(certificates)):
        files[f"ca-certificates/extra-{sha256(pem).hexdigest()[:16]}.crt"] = pem
    return files


def image_reference(files: dict[str, bytes]) -> str:
    digest = sha256(b"".join(sha256(path.encode() + b"\0" + data).digest() for path, data in sorted(files.items())))
    return f"{PROXY_REPOSITORY}:{digest.hexdigest()[:16]}"


def ensure_proxy_image(images: DockerImageEngine, certificates: Sequence[bytes]) -> str:
    """The proxy image for these CA certificates (trusted by pip at build time, and by the proxy
    for upstream servers), built from Debian on first use; its tag is a hash of its content."""
    files = image_files(certificates)
    reference = image_reference(files)
    if images.inspect_image(reference) is not None:
        return reference
    import tempfile  # only for a build, never on a warm start

    if images.inspect_image(PROXY_BASE) is None:
        images.pull(PROXY_BASE)
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="opencode-sandbox-proxy-") as folder:
        (Path(folder) / "ca-certificates").mkdir()
        for path, data in files.items():
            target = Path(folder) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        outcome = images.build(Path(folder), tag=reference, labels={
            LABEL_MANAGED: "true", LABEL_KIND: KIND_PROXY, LABEL_CONTENT_HASH: reference.rsplit(":", 1)[1],
        }, build_args={}, no_cache=False, on_line=log.append)
    if outcome.exit_code != 0:
        raise BootFailed(f"cannot build the egress proxy image {reference}: {(log or ['no output'])[-1]}",
                         hint="The build installs Debian packages and mitmproxy from PyPI: check the network "
                              "access of Docker builds (and `extra-ca-certificates` behind a TLS-intercepting "
                              "proxy), or use `network: public`.")
    return reference


def ensure_proxy(cli: DockerCli, images: DockerImageEngine, slug: str, image: str, policy: EgressPolicy,
                 host_addresses: Iterable[IpAddress], secret_values: Mapping[str, str],
                 owner: DockerOwner) -> ProxyEndpoint:
    """The project's proxy, running with `policy` and its own namespace's rules: started when it
    is stopped, created again when it is gone, died, holds another configuration or no owner
    label. It is given the values of the policy's secrets (`secret_values`, each one there) every
    time. Another host user's proxy, network or CA volume is refused (`OwnedByAnother`)."""
    name = proxy_name(slug)
    network = docker_netfilter.ensure_network(cli, slug, owner)
    policy_json = proxy_policy_document(policy, host_addresses)
    config = sha256(f"{image}\n{network}\n{policy_json}".encode()).hexdigest()[:16]
    document = _owned_proxy(cli, slug, owner)
    status = _status(document)
    if document is not None and (_labels(document).get(LABEL_PROXY_CONFIG) != config
                                 or _labels(document).get(LABEL_OWNER_UID) is None
                                 or status not in (SandboxStatus.RUNNING, SandboxStatus.STOPPED)):
        cli.run_raw(["rm", "--force", name])
        document = None
    if images.inspect_image(image) is None:
        raise BootFailed(f"the egress proxy image {image} does not exist",
                         hint="Remove the VM with `opencode-sandbox stop -f` and run again: that builds it.")
    try:
        if document is None:
            _ensure_ca_volume(cli, slug, owner)
            cli.run(_run_args(slug, image, network, config, owner.labels()),
                    environment={POLICY_VARIABLE: policy_json})
        elif status is not SandboxStatus.RUNNING:
            cli.run(["start", name])
    except DockerFailed as failure:
        raise BootFailed(f"cannot start the egress proxy {name}: {first_line(failure.stderr)}",
                         hint="Run again; if it keeps failing, check `docker logs " + name + "`.") from None
    docker_netfilter.apply_policy(cli, images, name, proxy_side_policy(policy))
    ca = _wait_ready(cli, name)
    if policy.secrets:
        give_secret_values(cli, name, {secret.name: secret_values[secret.name] for secret in policy.secrets})
    return ProxyEndpoint(docker_netfilter.address_on(cli, name, network), ca, name, network)


def give_args(name: str, what: str) -> list[str]:
    """The `docker exec` that writes what its stdin holds into the proxy's tmpfs (`what`: "values"
    or "clients"): the values go through stdin only, never a command line, an environment or a
    file on disk."""
    return ["exec", "--interactive", name, "/opt/mitmproxy/bin/python", "-c", _GIVE_SCRIPT, what]


def give_secret_values(cli: DockerCli, name: str, values: Mapping[str, str]) -> None:
    """Hand the running proxy the secrets' values, replacing the ones it held."""
    try:
        cli.run(give_args(name, "values"), stdin=json.dumps(values).encode())
    except DockerFailed as failure:
        raise BootFailed(f"cannot give the egress proxy {name} the secrets' values: {first_line(failure.stderr)}",
                         hint="Run again; if it keeps failing, check `docker logs " + name + "`.") from None


def _ensure_ca_volume(cli: DockerCli, slug: str, owner: DockerOwner) -> None:
    """The volume that keeps the proxy's CA across recreations, labelled as the project's and
    this host user's."""
    volume = ca_volume_name(slug)
    documents = cli.inspect("volume", [volume])
    if documents and str(documents[0].get("Name")) == volume:
        if not _is_projects(documents[0], slug):
            raise BootFailed(f"volume {volume} exists but was not created by opencode-sandbox",
                             hint=f"Rename or remove it with `docker volume rm {volume}`.")
        owner.require_piece(cli, "proxy CA volume", volume, slug, documents[0])
        return
    cli.run(["volume", "create", "--label", f"{LABEL_MANAGED}=true", "--label", f"{LABEL_SLUG}={slug}",
             "--label", f"{LABEL_KIND}={CA_VOLUME_KIND}", *label_args(owner.labels()), volume])


def _run_args(slug: str, image: str, network: str, config: str, owner_labels: Mapping[str, str]) -> list[str]:
    return [
        "run", "--detach", "--pull=never", "--name", proxy_name(slug), "--network", network,
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only", "--memory", "512m",
        "--tmpfs", "/tmp:size=64m",
        "--tmpfs", f"{RUN_DIR}:mode=0700,uid={PROXY_UID},gid={PROXY_UID},size=1m",
        "--mount", f"type=volume,source={ca_volume_name(slug)},target={CONFDIR}",
        "--label", f"{LABEL_MANAGED}=true", "--label", f"{LABEL_SLUG}={slug}", "--label", f"{LABEL_KIND}={KIND_PROXY}",
        "--label", f"{LABEL_PROXY_CONFIG}={config}", *label_args(owner_labels),
        "--env", POLICY_VARIABLE,
        image,
        "--listen-port", str(PROXY_PORT), "--set", f"confdir={CONFDIR}", "--set", "block_global=false",
        "--set", "ssl_verify_upstream_trusted_ca=/etc/ssl/certs/ca-certificates.crt",
        "--set", "flow_detail=0", "--set", "termlog_verbosity=warn", "--set", "onboarding=false",
        # What does not read as HTTP is parsed as HTTP all the same, and refused, never relayed raw.
        "--set", "rawtcp=false",
        "-s", f"{LIB_DIR}/proxy_addon.py",
    ]


def _wait_ready(cli: DockerCli, name: str) -> bytes:
    """The proxy's CA, once it listens (mitmproxy writes its CA before it listens)."""
    try:
        ca = cli.run(["exec", name, "/opt/mitmproxy/bin/python", "-c", _READY_SCRIPT],
                     timeout_s=READY_TIMEOUT_S + 30)
    except DockerFailed as failure:
        logs = cli.run_raw(["logs", "--tail", "5", name])
        last = (logs.stderr or logs.stdout).decode(errors="replace").strip().splitlines()
        raise BootFailed(f"the egress proxy {name} did not come up: "
                         f"{last[-1] if last else first_line(failure.stderr)}",
                         hint=f"See `docker logs {name}`; run again to recreate it.") from None
    if "BEGIN CERTIFICATE" not in ca:
        raise BootFailed(f"the egress proxy {name} has no CA certificate", hint="Run again to recreate it.")
    return ca.encode()


def trust_proxy(cli: DockerCli, vm: str, endpoint: ProxyEndpoint, holder: str) -> None:
    """Make the running VM trust the proxy's CA and find the proxy at its current address, and
    the proxy serve that VM alone: every local user reaches the proxy's address through the host's
    bridge, and with it the secrets the proxy puts in, so it answers nothing but the VM's address,
    that of its network `holder` (until it is given that address, nothing at all)."""
    try:
        cli.run(["exec", "--interactive", "--user", "root", "--workdir", "/", vm, "sh", "-c", _TRUST_SCRIPT,
                 "sh", str(endpoint.address)], stdin=endpoint.ca_pem)
    except DockerFailed as failure:
        raise BootFailed(f"cannot make {vm} trust its egress proxy: {first_line(failure.stderr)}",
                         hint="The runner image needs a POSIX shell and grep; run again.") from None
    vm_address = docker_netfilter.address_on(cli, holder, endpoint.network)
    try:
        cli.run(give_args(endpoint.name, "clients"), stdin=json.dumps([str(vm_address)]).encode())
    except DockerFailed as failure:
        raise BootFailed(f"cannot give the egress proxy {endpoint.name} its VM's address: "
                         f"{first_line(failure.stderr)}",
                         hint="Run again; if it keeps failing, check `docker logs " + endpoint.name + "`.") from None


def stop_proxy(cli: DockerCli, slug: str, owner: DockerOwner, kill: bool = False) -> None:
    """Stop (or kill) the project's proxy when it runs; a stopped or missing one is left as it is."""
    document = _owned_proxy(cli, slug, owner)
    if document is None or _status(document) is not SandboxStatus.RUNNING:
        return
    try:
        cli.run(["kill", proxy_name(slug)] if kill else ["stop", "--time", "5", proxy_name(slug)])
    except DockerFailed as failure:
        if "is not running" not in failure.stderr:
            raise


def denials(cli: DockerCli, slug: str, owner: DockerOwner) -> list[Refusal]:
    """What the project's proxy refused in the last hour, from the lines its addon writes."""
    if _owned_proxy(cli, slug, owner) is None:
        return []
    logged = cli.run_raw(["logs", "--since", "1h", proxy_name(slug)])
    return denials_of_log(logged.stdout.decode(errors="replace"))


def denials_of_log(text: str) -> list[Refusal]:
    """One refusal per refused host and port, with how often and when last; other lines are skipped."""
    from datetime import UTC, datetime

    seen: dict[tuple[str, int | None], Refusal] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            when = datetime.strptime(entry["t"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            host, port = str(entry["host"]), entry.get("port")
        except (ValueError, KeyError, TypeError):
            continue
        if entry.get("event") != "denied" or not isinstance(port, int | None):
            continue
        earlier = seen.get((host, port))
        attempts = earlier.attempts + 1 if earlier is not None else 1
        seen[(host, port)] = Refusal(host, "tcp", port, attempts, when, str(entry.get("reason") or ""))
    return list(seen.values())


def remove_proxy(cli: DockerCli, slug: str, owner: DockerOwner) -> None:
    """The project's proxy container and its CA volume, when they are this tool's and this host
    user's; another user's proxy is refused (`OwnedByAnother`), another user's volume left alone."""
    if _owned_proxy(cli, slug, owner) is not None:
        cli.run(["rm", "--force", proxy_name(slug)])
    volume = ca_volume_name(slug)
    documents = cli.inspect("volume", [volume])
    if documents and str(documents[0].get("Name")) == volume and _is_projects(documents[0], slug) \
            and owner.of_piece(cli, slug, _labels(documents[0])).usable:
        cli.run_raw(["volume", "rm", volume])


def _owned_proxy(cli: DockerCli, slug: str, owner: DockerOwner) -> dict[str, Any] | None:
    name = proxy_name(slug)
    documents = cli.inspect("container", [name])
    if not documents or str(documents[0].get("Name", "")).lstrip("/") != name:
        return None
    if not _is_projects(documents[0], slug):
        raise BootFailed(f"container {name} exists but was not created by opencode-sandbox",
                         hint=f"Rename or remove it with `docker rm -f {name}`.")
    owner.require_piece(cli, "egress proxy", name, slug, documents[0])
    return documents[0]


def _labels(document: dict[str, Any]) -> dict[str, str]:
    return {str(key): str(value) for key, value in ((document.get("Config") or {}).get("Labels") or
                                                    document.get("Labels") or {}).items()}


def _is_projects(document: dict[str, Any], slug: str) -> bool:
    labels = _labels(document)
    return labels.get(LABEL_MANAGED) == "true" and labels.get(LABEL_SLUG) == slug


def _status(document: dict[str, Any] | None) -> SandboxStatus | None:
    if document is None:
        return None
    from opencode_sandbox.runtime.docker.parse import container_status

    return container_status(document.get("State") or {})


def proxy_alive(cli: DockerCli, slug: str, owner: DockerOwner) -> bool:
    """Whether the project's proxy runs; a container of another tool or host user under its name
    does not count (starting the VM then says so)."""
    try:
        return _status(_owned_proxy(cli, slug, owner)) is SandboxStatus.RUNNING
    except (BootFailed, OwnedByAnother):
        return False

