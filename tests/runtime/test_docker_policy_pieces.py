"""Which Docker objects count as a project's policy pieces, and what their removal refuses. The real
listing and removal run in tests/e2e/test_network_policy_docker.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from opencode_sandbox.core.naming import LABEL_KIND, LABEL_MANAGED, LABEL_SLUG
from opencode_sandbox.core.prune_plan import ArtifactKind, PolicyPieceFact
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import NotFound, SandboxError
from opencode_sandbox.runtime.docker_policy_pieces import list_policy_pieces, remove_policy_piece

SLUG = "web-0123456789abcd"
CREATED = "2026-11-30T10:00:00.123456789Z"


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
             in_config: bool = False) -> dict[str, Any]:
    labels = {LABEL_MANAGED: managed, LABEL_KIND: kind_label, **({LABEL_SLUG: slug} if slug else {})}
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
    assert list_policy_pieces(cli) == [
        PolicyPieceFact(ArtifactKind.EGRESS_PROXY, f"opencode-sandbox-proxy-{SLUG}", SLUG, when),
        PolicyPieceFact(ArtifactKind.PROXY_CA_VOLUME, f"opencode-sandbox-proxy-ca-{SLUG}", SLUG, when),
        PolicyPieceFact(ArtifactKind.PROJECT_NETWORK, f"opencode-sandbox-net-{SLUG}", SLUG, when),
    ]


def test_removal_takes_only_this_tools_piece_and_says_when_it_is_gone() -> None:
    ours = f"opencode-sandbox-net-{SLUG}"
    look_alike = "opencode-sandbox-net-theirs-0123456789abcd"
    cli = Listed({"network": [document(ours, "network"), document(look_alike, "network", slug=SLUG)]})
    remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, ours)
    assert cli.ran == [["network", "rm", ours]]
    with pytest.raises(SandboxError, match="not created by opencode-sandbox"):
        remove_policy_piece(cli, ArtifactKind.PROJECT_NETWORK, look_alike)
    with pytest.raises(NotFound):
        remove_policy_piece(cli, ArtifactKind.EGRESS_PROXY, f"opencode-sandbox-proxy-{SLUG}")
    assert cli.ran == [["network", "rm", ours]]
