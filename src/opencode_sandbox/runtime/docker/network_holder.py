"""A project VM's network holder on the docker runtime: a sleeping container that owns the VM's
network namespace, which the VM joins (`--network container:HOLDER`).

A container's network namespace lives only as long as the container runs. Held by the VM
itself, its policy's rules went with every stop, and every start had to run a helper container
to install them again before the VM could be used. Held here, the namespace, its nftables rules
and the VM's published ports outlive a stop of the VM: a VM started again joins the same
namespace with its rules already in place, and its start installs nothing.

The holder runs `sleep` from the network filter image under an init and holds only `NET_ADMIN`,
which `nft` needs when the rules are installed through an exec in it. It shares nothing with
the VM but the network namespace: no process the VM can see or signal, no file, and nothing
listening. It stays up while its VM is stopped and goes with the VM when the VM is removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import LABEL_KIND, LABEL_MANAGED, LABEL_SLUG, TOOL, slug_of_vm
from opencode_sandbox.engine.command import DockerCli, DockerFailed, first_line
from opencode_sandbox.errors import BootFailed
from opencode_sandbox.runtime.docker import policy_marks
from opencode_sandbox.runtime.docker.args import label_args
from opencode_sandbox.runtime.docker.parse import container_status, labels_of, parse_time
from opencode_sandbox.runtime.types import SandboxStatus

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.runtime.docker.owner import DockerOwner

HOLDER_PREFIX = f"{TOOL}-netns-"
HOLDER_KIND = "network-holder"
"""The `kind` label of a network holder."""
NETWORK_MODE_PREFIX = "container:"


def holder_name(slug: str) -> str:
    return HOLDER_PREFIX + slug


def holder_of(vm_document: Mapping[str, Any]) -> str | None:
    """The name of the holder whose network namespace the VM joins, None for a VM with a network
    of its own (one made by an earlier version)."""
    slug = slug_of_vm(_name(vm_document))
    return holder_name(slug) if slug is not None and _joined_id(vm_document) else None


def _joined_id(vm_document: Mapping[str, Any]) -> str:
    """The container ID the engine recorded for `--network container:NAME`."""
    mode = str((vm_document.get("HostConfig") or {}).get("NetworkMode") or "")
    return mode.removeprefix(NETWORK_MODE_PREFIX) if mode.startswith(NETWORK_MODE_PREFIX) else ""


def run_args(slug: str, image: str, network: str, ports: Sequence[int], host_ports: Mapping[int, int],
             hosts: Mapping[str, str], owner_labels: Mapping[str, str]) -> list[str]:
    """`docker run -d` for the holder of a project's VM: on the project's network, with the VM's
    published ports (`host_ports`: those with a chosen host port) and host names."""
    args = [
        "run", "--detach", "--pull=never", "--name", holder_name(slug), "--init", "--network", network,
        "--cap-drop", "ALL", "--cap-add", "NET_ADMIN", "--security-opt", "no-new-privileges", "--read-only",
        "--memory", "32m", "--pids-limit", "16",
        "--label", f"{LABEL_MANAGED}=true", "--label", f"{LABEL_SLUG}={slug}", "--label", f"{LABEL_KIND}={HOLDER_KIND}",
        *label_args(owner_labels),
    ]
    for host, address in sorted(hosts.items()):
        args += ["--add-host", f"{host}:{address}"]
    for port in ports:
        args += ["--publish", f"127.0.0.1:{host_ports.get(port, '')}:{port}/tcp"]
    return [*args, "--entrypoint", "sleep", image, "infinity"]


def create(cli: DockerCli, slug: str, args: list[str], owner: DockerOwner) -> str:
    """A new holder made with `args` (`run_args`); one left by an earlier VM of the project goes first."""
    remove(cli, slug, owner)
    try:
        cli.run(args)
    except DockerFailed as failure:
        remove(cli, slug, owner)
        raise BootFailed(f"cannot create the network holder {holder_name(slug)}: {first_line(failure.stderr)}",
                         hint="A chosen host port may be taken: check `ports` in your configuration, then run "
                              "again.") from None
    return holder_name(slug)


def running(cli: DockerCli, slug: str, owner: DockerOwner) -> dict[str, Any]:
    """The project's holder, started when it is stopped; BootFailed when it is gone."""
    name = holder_name(slug)
    document = _owned(cli, slug, owner)
    if document is None:
        raise BootFailed(f"the network holder {name} of this project's VM is gone",
                         hint="Remove the VM with `opencode-sandbox stop -f` (the home volume stays), then run "
                              "again.")
    if container_status(document.get("State") or {}) is SandboxStatus.RUNNING:
        return document
    try:
        cli.run(["start", name])
    except DockerFailed as failure:
        raise BootFailed(f"cannot start the network holder {name}: {first_line(failure.stderr)}",
                         hint="A chosen host port may be taken by something else now; free it, then run "
                              "again.") from None
    started = _owned(cli, slug, owner)
    if started is None:
        raise BootFailed(f"the network holder {name} disappeared while starting", hint="Run again.")
    return started


def rules_in_place(document: Mapping[str, Any]) -> bool:
    """Whether the running holder's namespace holds the rules installed for its current start."""
    state = document.get("State") or {}
    return container_status(state) is SandboxStatus.RUNNING \
        and policy_marks.installed_for(_name(document), str(state.get("StartedAt") or ""))


def mark_rules_installed(document: Mapping[str, Any]) -> None:
    policy_marks.record(_name(document), str((document.get("State") or {}).get("StartedAt") or ""))


def is_holder_of(vm_document: Mapping[str, Any], holder_document: Mapping[str, Any]) -> bool:
    """Whether the VM joins this very holder (one made again under the same name is another)."""
    joined = _joined_id(vm_document)
    return bool(joined) and str(holder_document.get("Id") or "").startswith(joined)


def joined_current_namespace(vm_document: Mapping[str, Any], holder_document: Mapping[str, Any]) -> bool:
    """Whether the running VM started in the holder's present namespace: a VM that was running when
    its holder started again sits in the old one, which has no network left."""
    if not is_holder_of(vm_document, holder_document):
        return False
    vm_started = parse_time((vm_document.get("State") or {}).get("StartedAt"))
    holder_started = parse_time((holder_document.get("State") or {}).get("StartedAt"))
    return vm_started is not None and holder_started is not None and vm_started >= holder_started


def find(cli: DockerCli, slug: str, owner: DockerOwner) -> dict[str, Any] | None:
    """The project's holder, None when there is none."""
    return _owned(cli, slug, owner)


def remove(cli: DockerCli, slug: str, owner: DockerOwner) -> None:
    """The project's holder, when it is this tool's and this host user's."""
    if _owned(cli, slug, owner) is not None:
        cli.run_raw(["rm", "--force", holder_name(slug)])
    policy_marks.forget(holder_name(slug))


def _owned(cli: DockerCli, slug: str, owner: DockerOwner) -> dict[str, Any] | None:
    name = holder_name(slug)
    documents = cli.inspect("container", [name])
    if not documents or _name(documents[0]) != name:
        return None
    labels = labels_of(documents[0])
    if labels.get(LABEL_MANAGED) != "true" or labels.get(LABEL_SLUG) != slug \
            or labels.get(LABEL_KIND) != HOLDER_KIND:
        raise BootFailed(f"container {name} exists but was not created by opencode-sandbox",
                         hint=f"Rename or remove it with `docker rm -f {name}`.")
    owner.require_piece(cli, "network holder", name, slug, documents[0])
    return documents[0]


def _name(document: Mapping[str, Any]) -> str:
    return str(document.get("Name", "")).lstrip("/")
