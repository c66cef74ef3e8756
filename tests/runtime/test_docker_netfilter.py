"""The VM's own network, through the engine's socket and through the `docker` command alike."""

from __future__ import annotations

import subprocess

import pytest

from opencode_sandbox.core.naming import LABEL_MANAGED, LABEL_OWNER_UID, LABEL_SLUG
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import BootFailed
from opencode_sandbox.runtime.docker.netfilter import ensure_network, network_name, remove_network
from opencode_sandbox.runtime.docker.owner import DockerOwner

OWNER = DockerOwner()

pytestmark = pytest.mark.docker


def labels_of(name: str) -> str:
    return subprocess.run(["docker", "network", "inspect", "--format", "{{json .Labels}}", name],
                          capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("transport", ["socket", "command"])
def test_the_network_is_made_once_labelled_and_removed(transport: str, unique: str) -> None:
    cli = DockerCli()
    if transport == "command":
        cli.give_up_socket()
    slug = f"{unique}-0123456789abcd"
    name = network_name(slug)
    try:
        remove_network(cli, slug, OWNER)  # nothing there: nothing to do
        assert ensure_network(cli, slug, OWNER) == name
        assert ensure_network(cli, slug, OWNER) == name
        labels = labels_of(name)
        assert f'"{LABEL_MANAGED}":"true"' in labels and f'"{LABEL_SLUG}":"{slug}"' in labels
        assert f'"{LABEL_OWNER_UID}":"{OWNER.uid}"' in labels
        remove_network(cli, slug, OWNER)
        assert labels_of(name) == ""
    finally:
        subprocess.run(["docker", "network", "rm", name], capture_output=True)


def test_a_foreign_network_of_that_name_is_refused_and_kept(unique: str) -> None:
    cli = DockerCli()
    slug = f"{unique}-0123456789abcd"
    name = network_name(slug)
    subprocess.run(["docker", "network", "create", name], capture_output=True, check=True)
    try:
        with pytest.raises(BootFailed, match="not created by opencode-sandbox"):
            ensure_network(cli, slug, OWNER)
        remove_network(cli, slug, OWNER)
        assert labels_of(name) != ""
    finally:
        subprocess.run(["docker", "network", "rm", name], capture_output=True)
