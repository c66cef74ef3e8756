"""The docker runtime's network containment: each VM's own network, and the nftables ruleset of
its policy installed into the VM's network namespace.

That namespace belongs to the VM's network holder (`network_holder`), which runs this tool's
small filter image (Debian with its `nftables` package) and holds only `NET_ADMIN`: the rules
are installed by an exec of `nft` in the holder, before the VM starts, and stay while the holder
runs. Nothing is added to runner images, and no privileged process runs beside the agent. The
VM itself runs without `NET_RAW`, so root in it can neither change the rules (no `NET_ADMIN`)
nor go around them with a raw socket. The egress proxy's own rules go into its namespace through
a short-lived helper container of the same image (`--network container:PROXY`).

Each VM gets a user-defined network of its own: Docker's embedded DNS server then answers the
VM on its loopback (on the default bridge the VM would use the host's resolver, often a private
address that `public` refuses), and VMs of different projects cannot see each other.
"""

from __future__ import annotations

import ipaddress
import json
from datetime import UTC, datetime
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.egress import EgressPolicy, IpAddress
from opencode_sandbox.core.naming import LABEL_CONTENT_HASH, LABEL_KIND, LABEL_MANAGED, LABEL_PREFIX, LABEL_SLUG, TOOL
from opencode_sandbox.engine.command import DockerCli, DockerFailed, first_line
from opencode_sandbox.errors import BootFailed
from opencode_sandbox.runtime.docker.args import label_args
from opencode_sandbox.runtime.docker.nft_ruleset import TABLE, nft_ruleset, refusals_of_listing
from opencode_sandbox.runtime.host_addresses import host_public_addresses, host_resolvers
from opencode_sandbox.runtime.types import Refusal

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.engine.docker import DockerImageEngine
    from opencode_sandbox.runtime.docker.owner import DockerOwner

LABEL_NETWORK_POLICY = LABEL_PREFIX + "network-policy"
NETFILTER_IMAGE = f"{TOOL}/netfilter:latest"
NETFILTER_BASE = "debian:trixie-slim"
NETWORK_PREFIX = f"{TOOL}-net-"
NETWORK_KIND = "network"
"""The `kind` label of a project's network."""
DOCKERFILE = f"""FROM {NETFILTER_BASE}
RUN apt-get update && apt-get install -y --no-install-recommends nftables && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["nft"]
"""


def network_name(slug: str) -> str:
    return NETWORK_PREFIX + slug


def policy_label(policy: EgressPolicy) -> str:
    """The policy as the VM container keeps it, for the starts that follow (no secret in it)."""
    return json.dumps(policy.fingerprint_value(), sort_keys=True, separators=(",", ":"))


def policy_of_label(text: str | None) -> EgressPolicy | None:
    if not text:
        return None
    from opencode_sandbox.core.policy_document import policy_of_document

    return policy_of_document(json.loads(text))


def _network(cli: DockerCli, name: str) -> dict[str, Any] | None:
    try:
        documents = cli.inspect("network", [name])
    except DockerFailed as failure:
        if "not found" in failure.stderr.lower():  # the command's words for a missing network
            return None
        raise
    return documents[0] if documents and str(documents[0].get("Name")) == name else None


def address_on(cli: DockerCli, container: str, network: str, field: str = "IPAddress") -> IpAddress:
    """The container's address on `network` (`field` "Gateway": the host's side of it)."""
    documents = cli.inspect("container", [container])
    networks = ((documents[0].get("NetworkSettings") or {}).get("Networks") or {}) if documents else {}
    text = str((networks.get(network) or {}).get(field) or "")
    if not text:
        raise BootFailed(f"{container} has no {field.lower()} on {network}", hint="Run again to recreate it.")
    return ipaddress.ip_address(text)


def ensure_network(cli: DockerCli, slug: str, owner: DockerOwner) -> str:
    """The project's own network, created on first use and labelled as this tool's and this
    host user's; another user's is refused (`OwnedByAnother`)."""
    name = network_name(slug)
    document = _network(cli, name)
    if document is not None:
        labels = document.get("Labels") or {}
        if labels.get(LABEL_MANAGED) != "true" or labels.get(LABEL_SLUG) != slug:
            raise BootFailed(f"network {name} exists but was not created by opencode-sandbox",
                             hint=f"Rename or remove it with `docker network rm {name}`.")
        owner.require_piece(cli, "network", name, slug, document)
        return name
    try:
        cli.run(["network", "create", "--label", f"{LABEL_MANAGED}=true", "--label", f"{LABEL_SLUG}={slug}",
                 "--label", f"{LABEL_KIND}={NETWORK_KIND}", *label_args(owner.labels()), name])
    except DockerFailed as failure:
        if "already exists" not in failure.stderr:
            raise BootFailed(f"cannot create the network {name}: {first_line(failure.stderr)}",
                             hint="Check `docker network ls`, then run again.") from None
    return name


def remove_network(cli: DockerCli, slug: str, owner: DockerOwner) -> None:
    """The project's network, once no container uses it; anything else, another host user's
    included, is left alone."""
    name = network_name(slug)
    document = _network(cli, name)
    if document is None:
        return
    labels = document.get("Labels") or {}
    if labels.get(LABEL_MANAGED) == "true" and labels.get(LABEL_SLUG) == slug and not document.get("Containers") \
            and owner.of_piece(cli, slug, labels).usable:
        cli.run_raw(["network", "rm", name])


def ensure_netfilter_image(cli: DockerCli, images: DockerImageEngine) -> str:
    """The helper image with `nft`, built here from Debian once (and again when its recipe changes)."""
    content_hash = sha256(DOCKERFILE.encode()).hexdigest()[:16]
    document = images.inspect_image(NETFILTER_IMAGE)
    if document is not None and ((document.get("Config") or {}).get("Labels") or {}).get(
            LABEL_CONTENT_HASH) == content_hash:
        return NETFILTER_IMAGE
    import tempfile  # only for a build, never on a warm start

    if images.inspect_image(NETFILTER_BASE) is None:
        images.pull(NETFILTER_BASE)
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="opencode-sandbox-netfilter-") as folder:
        (Path(folder) / "Dockerfile").write_text(DOCKERFILE)
        outcome = images.build(Path(folder), tag=NETFILTER_IMAGE, labels={
            LABEL_MANAGED: "true", LABEL_KIND: "netfilter", LABEL_CONTENT_HASH: content_hash,
        }, build_args={}, no_cache=False, on_line=log.append)
    if outcome.exit_code != 0:
        raise BootFailed(f"cannot build the network filter image {NETFILTER_IMAGE}: "
                         f"{(log or ['no output'])[-1]}",
                         hint="The build installs Debian's nftables package: check the network access of "
                              "Docker builds, or use `network: all`.")
    return NETFILTER_IMAGE


def refusals(cli: DockerCli, images: DockerImageEngine, container: str) -> list[Refusal]:
    """What the running `container`'s rules refused in the last hour (lost when it stops)."""
    image = ensure_netfilter_image(cli, images)
    try:
        listing = cli.run(["run", "--rm", "--pull=never", "--network", f"container:{container}", "--cap-drop", "ALL",
                           "--cap-add", "NET_ADMIN", "--label", f"{LABEL_MANAGED}=helper", image,
                           "-j", "list", "table", "inet", TABLE])
    except DockerFailed as failure:
        if "No such file or directory" in failure.stderr:  # nft's words for a table that is not there
            return []
        raise BootFailed(f"cannot read the network policy's refusals in {container}: {first_line(failure.stderr)}",
                         hint="Check that the VM runs (`opencode-sandbox list`), then try again.") from None
    return refusals_of_listing(listing, datetime.now(UTC))


def _ruleset(cli: DockerCli, container: str, policy: EgressPolicy, proxy: IpAddress | None,
             published_on: str | None) -> str | None:
    gateway = address_on(cli, container, published_on, "Gateway") if published_on is not None else None
    return nft_ruleset(policy, host_public_addresses(), host_resolvers(), proxy, gateway)


def _install_failed(policy: EgressPolicy, container: str, failure: DockerFailed) -> BootFailed:
    return BootFailed(f"cannot install the network policy ({policy.profile.value}) in {container}: "
                      f"{first_line(failure.stderr)}",
                      hint="Run again; if it keeps failing, check `opencode-sandbox doctor`.")


def apply_policy(cli: DockerCli, images: DockerImageEngine, container: str, policy: EgressPolicy,
                 proxy: IpAddress | None = None, published_on: str | None = None) -> None:
    """Install `policy` into the running `container`'s network namespace through a helper
    container; BootFailed when it cannot. `proxy`: the address of the project's egress proxy, for
    a policy that needs one. `published_on`: the network whose gateway (the host's side) is the
    only source of new connections to the container: where its published ports come from."""
    ruleset = _ruleset(cli, container, policy, proxy, published_on)
    if ruleset is None:
        return
    image = ensure_netfilter_image(cli, images)
    try:
        cli.run(["run", "--rm", "--interactive", "--pull=never", "--network", f"container:{container}",
                 "--cap-drop", "ALL", "--cap-add", "NET_ADMIN", "--label", f"{LABEL_MANAGED}=helper",
                 image, "-f", "-"], stdin=ruleset.encode())
    except DockerFailed as failure:
        raise _install_failed(policy, container, failure) from None


def install_in_holder(cli: DockerCli, holder: str, policy: EgressPolicy, proxy: IpAddress | None,
                      published_on: str) -> None:
    """Install `policy` into the namespace of a VM's running network holder (`network_holder`),
    through an exec of `nft` in it: the holder runs the filter image and holds `NET_ADMIN`."""
    ruleset = _ruleset(cli, holder, policy, proxy, published_on)
    if ruleset is None:
        return
    try:
        cli.run(["exec", "--interactive", "--user", "root", holder, "nft", "-f", "-"], stdin=ruleset.encode())
    except DockerFailed as failure:
        raise _install_failed(policy, holder, failure) from None
