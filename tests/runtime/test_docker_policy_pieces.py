"""Which Docker objects count as a project's policy pieces, and what their removal refuses. The real
listing and removal run in tests/e2e/test_network_policy_docker.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from opencode_sandbox.core.naming import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER_UID, LABEL_SLUG
from opencode_sandbox.core.prune_plan import ArtifactKind, PolicyPieceFact
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import NotFound, OwnedByAnother, SandboxError
from opencode_sandbox.runtime.docker.owner import DockerOwner
from opencode_sandbox.runtime.docker.policy_pieces import list_policy_pieces, remove_policy_piece

SLUG = "web-0123456789abcd"
CREATED = "2026-11-30T10:00:00.123456789Z"
ME = 4242
STRANGER = 4343
OWNER = DockerOwner(ME)


class Listed(DockerCli):
    """A Docker engine holding the given objects, by type; records the commands run."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__()
        self.objects = objects
        self.ran: list[list[str]] = []

    def lines(self, args: Sequence[str]) -> list[str]:
        object_type = {"ps": "container", "volume": "volume", "network": "network"}[args[0]]
        return [str(document["Name"]) for document in self.objects.get(object_type, [])]

    def inspect(self, kind: str, names: Sequence[str]) -> list[dict[str, Any]]:
        return [document for document in self.objects.get(kind, []) if str(document["Name"]) in names]

    def run(self, args: Sequence[str], *unused: Any, **options: Any) -> Any:
        self.ran.append(list(args))


def document(name: str, kind_label: str, slug: str | None = SLUG, managed: str = "true",
             in_config: bool = False, owner: int | None = ME) -> dict[str, Any]:
    labels = {LABEL_MANAGED: managed, LABEL_KIND: kind_label, **({LABEL_SLUG: slug} if slug else {}),
              **({LABEL_OWNER_UID: str(owner)} if owner is not None else {})}
    if in_config:
        return {"Name": "/" + name, "Created": CREATED, "Config": {"Labels": labels}}
    return {"Name": name, "CreatedAt" if kind_label == "proxy-ca" else "Created": CREATED, "Labels": labels}


def test_each_kind_is_recognised_by_its_labels_and_a_name_that_matches_its_slug() -> None:
    when = datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)
    cli = Listed({
        "container": [document(f"opencode-sandbox-proxy-{SLUG}", "proxy", in_config=True),
                      document("opencode-sandbox-proxy-other-0123456789abcd", "proxy", in_config=True),
                      document(f"opencode-sandbox-vm-{SLUG}", "proxy", in_config=True)],
        "volume": [document(f"opencode-sandbox-proxy-ca-{SLUG}", "proxy-ca"),
                   document(f"opencode-sandbox-proxy-ca-{SLUG}x", "proxy-ca", slug=None)],
        "network": [document(f"opencode-sandbox-net-{SLUG}", "network"),
                    document("opencode-sandbox-net-theirs-0123456789abcd", "network", managed="helper",
                             slug="theirs-0123456789abcd")],
    })
    pieces = list_policy_pieces(cli, OWNER)
    assert [piece._replace(labels={}) for piece in pieces] == [
        PolicyPieceFact(ArtifactKind.EGRESS_PROXY, f"opencode-sandbox-proxy-{SLUG}", SLUG, when),
        PolicyPieceFact(ArtifactKind.PROXY_CA_VOLUME, f"opencode-sandbox-proxy-ca-{SLUG}", SLUG, when),
        PolicyPieceFact(ArtifactKind.PROJECT_NETWORK, f"opencode-sandbox-net-{SLUG}", SLUG, when),
    ]
    assert {piece.labels[LABEL_OWNER_UID] for piece in pieces} == {str(ME)}


def test_another_host_users_pieces_are_neither_listed_nor_removed() -> None:
    network = f"opencode-sandbox-net-{SLUG}"
    cli = Listed({"container": [document(f"opencode-sandbox-proxy-{SLUG}", "proxy", in_config=True,
                                         owner=STRANGER)],
                  "network": [document(network, "network", owner=STRANGER)]})
    assert list_policy_pieces(cli, OWNER) == []
    with pytest.raises(OwnedByAnother, match=f"belongs to host user uid {STRANGER}") as raised:
        remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, network, OWNER)
    assert raised.value.owner_uid == STRANGER
    assert "opencode-sandbox prune" in (raised.value.hint or "")
    assert cli.ran == []


def test_pieces_an_older_version_left_unlabelled_go_with_the_users_record_of_the_project() -> None:
    """No VM: the pieces are the user's whose state file records the project, nobody else's."""
    network = f"opencode-sandbox-net-{SLUG}"
    cli = Listed({"network": [document(network, "network", owner=None)]})
    recorded = DockerOwner(ME, {SLUG: "opencode-sandbox-home-web-0123456789abcd-20260101T000000"}.get)
    assert [piece.name for piece in list_policy_pieces(cli, recorded)] == [network]
    assert list_policy_pieces(cli, OWNER) == []
    with pytest.raises(OwnedByAnother, match="names no owner"):
        remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, network, OWNER)
    remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, network, recorded)
    assert cli.ran == [["network", "rm", network]]


def test_removal_takes_only_this_tools_piece_and_says_when_it_is_gone() -> None:
    ours = f"opencode-sandbox-net-{SLUG}"
    look_alike = "opencode-sandbox-net-theirs-0123456789abcd"
    cli = Listed({"network": [document(ours, "network"), document(look_alike, "network", slug=SLUG)]})
    remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, ours, OWNER)
    assert cli.ran == [["network", "rm", ours]]
    with pytest.raises(SandboxError, match="not created by opencode-sandbox"):
        remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, look_alike, OWNER)
    with pytest.raises(NotFound):
        remove_policy_piece(cli, ArtifactKind.EGRESS_PROXY, f"opencode-sandbox-proxy-{SLUG}", OWNER)
    assert cli.ran == [["network", "rm", ours]]
