"""What the docker runtime keeps beside a project's VM for its network policy, as pruning sees it:
the egress proxy container, the VM's network holder, the proxy's CA volume and the project's
network.

Removing a VM through the tool removes them too; these are found here when the VM was removed
another way (`docker rm`). A piece counts as this tool's only with our managed label and a slug
label whose names match its own name, and as this host user's by its owner label
(`docker_owner`): another user's pieces are neither listed nor removed.
"""

from __future__ import annotations

from collections.abc import Callable

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import KIND_PROXY, LABEL_KIND, LABEL_MANAGED, LABEL_SLUG
from opencode_sandbox.core.prune_plan import ArtifactKind, PolicyPieceFact
from opencode_sandbox.core.records import Record
from opencode_sandbox.engine.command import DockerCli, DockerFailed, first_line
from opencode_sandbox.errors import NotFound, SandboxError
from opencode_sandbox.runtime.docker.netfilter import NETWORK_KIND, network_name
from opencode_sandbox.runtime.docker.network_holder import HOLDER_KIND, holder_name
from opencode_sandbox.runtime.docker.parse import labels_of, parse_time
from opencode_sandbox.runtime.docker.proxy import CA_VOLUME_KIND, ca_volume_name, proxy_name

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.runtime.docker.owner import DockerOwner


class _Sort(Record):
    """How Docker lists, inspects and removes one kind of piece, and how this tool names and labels it."""

    object_type: str
    kind_label: str
    name_of: Callable[[str], str]
    list_command: tuple[str, ...]
    remove_command: tuple[str, ...]


_SORTS = {
    ArtifactKind.EGRESS_PROXY: _Sort("container", KIND_PROXY, proxy_name, ("ps", "--all", "--no-trunc"),
                                     ("rm", "--force")),
    ArtifactKind.NETWORK_HOLDER: _Sort("container", HOLDER_KIND, holder_name, ("ps", "--all", "--no-trunc"),
                                       ("rm", "--force")),
    ArtifactKind.PROXY_CA_VOLUME: _Sort("volume", CA_VOLUME_KIND, ca_volume_name, ("volume", "ls"),
                                        ("volume", "rm")),
    ArtifactKind.PROJECT_NETWORK: _Sort("network", NETWORK_KIND, network_name, ("network", "ls", "--no-trunc"),
                                        ("network", "rm")),
}
_WHAT = {ArtifactKind.EGRESS_PROXY: "egress proxy", ArtifactKind.NETWORK_HOLDER: "network holder",
         ArtifactKind.PROXY_CA_VOLUME: "proxy CA volume",
         ArtifactKind.PROJECT_NETWORK: "network"}
"""How a refusal names each kind of piece."""


def list_policy_pieces(cli: DockerCli, owner: DockerOwner) -> list[PolicyPieceFact]:
    found: list[PolicyPieceFact] = []
    for kind, sort in _SORTS.items():
        ids = cli.lines([*sort.list_command, "--quiet", "--filter", f"label={LABEL_MANAGED}=true",
                         "--filter", f"label={LABEL_KIND}={sort.kind_label}"])
        found += [piece for document in cli.inspect(sort.object_type, ids)
                  if (piece := _piece(kind, document)) is not None
                  and owner.of_piece(cli, piece.slug, piece.labels).usable]
    return found


def remove_policy_piece(cli: DockerCli, kind: ArtifactKind, name: str, owner: DockerOwner) -> None:
    """Remove one piece; `NotFound` when it is gone, `OwnedByAnother` when it is another host
    user's, `SandboxError` when it is not ours or in use."""
    sort = _SORTS[kind]
    documents = cli.inspect(sort.object_type, [name])
    if not documents:
        raise NotFound(f"{kind.value} {name} is gone", hint=None)
    piece = _piece(kind, documents[0])
    if piece is None or piece.name != name:
        raise SandboxError(f"{sort.object_type} {name} was not created by opencode-sandbox; left alone", hint=None)
    owner.require_piece(cli, _WHAT[kind], name, piece.slug, documents[0])
    try:
        cli.run([*sort.remove_command, name])
    except DockerFailed as failure:
        if failure.is_missing:
            raise NotFound(f"{kind.value} {name} is gone", hint=None) from None
        raise SandboxError(f"cannot remove {kind.value} {name}: {first_line(failure.stderr)}",
                           hint=f"Something else may still use it: see `docker {sort.object_type} inspect {name}`.") \
            from None


def _piece(kind: ArtifactKind, document: dict[str, Any]) -> PolicyPieceFact | None:
    sort = _SORTS[kind]
    labels = labels_of(document)
    name = str(document.get("Name", "")).lstrip("/")
    slug = labels.get(LABEL_SLUG, "")
    if labels.get(LABEL_MANAGED) != "true" or labels.get(LABEL_KIND) != sort.kind_label or not slug \
            or name != sort.name_of(slug):
        return None
    return PolicyPieceFact(kind, name, slug, parse_time(document.get("Created") or document.get("CreatedAt")), labels)
