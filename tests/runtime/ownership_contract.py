"""What the docker runtime promises about host users on a shared engine, as a test mixin for the
backends that keep one engine's objects for every user: the docker backend and the fake in its
docker kind. (msb keeps each user's VMs under their own MSB_HOME: no other user's VM is there.)

A test class subclasses `OwnershipContract` (a `RuntimeContract`) and provides, besides that
contract's fixtures, `acting_for`: the runtime acting for this process's uid with a given
record of home volumes (the state folder's), on the same objects as `runtime`. `foreign` makes
objects with the labels a test gives, as another host user's run or an older version left them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pytest

from opencode_sandbox.core.naming import (
    LABEL_OWNER_UID,
    home_volume_name,
    managed_labels,
    owner_labels,
    vm_name,
)
from opencode_sandbox.errors import OwnedByAnother
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.docker.owner import RecordedHome
from tests.runtime.contract import Created, RuntimeContract, new_slug

ME = os.getuid()
STRANGER = 1001 if ME != 1001 else 1002
"""Another host user's uid."""


class LabelledArtifacts(Protocol):
    """Makes artifacts with our names and the labels given, as another run of the tool made them."""

    def sandbox(self, name: str, labels: dict[str, str] | None = None, mounts: tuple[str, ...] = ()) -> None:
        """A stopped sandbox from the contract image, mounting the named volumes."""
    def volume(self, name: str, labels: dict[str, str]) -> None: ...
    def sandbox_exists(self, name: str) -> bool: ...
    def volume_exists(self, name: str) -> bool: ...


ActingFor = Callable[[RecordedHome | None], Runtime]


class OwnershipContract(RuntimeContract):
    """The runtime contract and the host users' part of it; provide `acting_for` and a labelling `foreign`."""

    def test_what_it_makes_carries_its_host_users_uid(
        self, runtime: Runtime, contract_image: str, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        home = created.volume(slug)
        volume = runtime.get_volume(home)
        assert volume is not None and volume.labels[LABEL_OWNER_UID] == str(ME)
        info = created.sandbox(self.spec(slug, contract_image, workspace, home=home))
        assert info.labels[LABEL_OWNER_UID] == str(ME)
        again = runtime.get_sandbox(info.name)
        assert again is not None and not again.owner_unlabelled
        assert info.name in {sandbox.name for sandbox in runtime.list_sandboxes()}

    def test_another_host_users_sandbox_and_volume_are_never_listed_nor_touched(
        self, runtime: Runtime, contract_image: str, foreign: LabelledArtifacts, created: Created, workspace: Path
    ) -> None:
        slug = new_slug()
        theirs = {**managed_labels(slug), **owner_labels(STRANGER)}
        home, name = home_volume_name(slug), vm_name(slug)
        foreign.volume(home, theirs)
        foreign.sandbox(name, theirs, mounts=(home,))
        assert name not in {sandbox.name for sandbox in runtime.list_sandboxes()}
        assert home not in {volume.name for volume in runtime.list_volumes()}
        assert runtime.sandbox_images()[name] == contract_image  # what it runs on counts as in use
        attempts: list[Callable[[], object]] = [
            lambda: runtime.get_sandbox(name), lambda: runtime.start_sandbox(name),
            lambda: runtime.stop_sandbox(name), lambda: runtime.kill_sandbox(name),
            lambda: runtime.remove_sandbox(name), lambda: runtime.port_map(name),
            lambda: created.sandbox(self.spec(slug, contract_image, workspace)),
            lambda: runtime.get_volume(home), lambda: runtime.remove_volume(home),
            lambda: runtime.copy_volume(home, home), lambda: runtime.fill_volume_from_image(home, contract_image),
        ]
        for attempt in attempts:
            with pytest.raises(OwnedByAnother) as raised:
                attempt()
            assert raised.value.owner_uid == STRANGER
            assert f"uid {STRANGER}" in raised.value.message and raised.value.hint
        assert foreign.sandbox_exists(name) and foreign.volume_exists(home)

    def test_an_older_versions_sandbox_and_home_volume_are_theirs_whose_state_records_them(
        self, acting_for: ActingFor, foreign: LabelledArtifacts
    ) -> None:
        slug = new_slug()
        unlabelled = managed_labels(slug)
        home = home_volume_name(slug, datetime(2030, 1, 1, tzinfo=UTC))
        other_home = home_volume_name(slug, datetime(2030, 1, 2, tzinfo=UTC))
        name = vm_name(slug)
        foreign.volume(home, unlabelled)
        foreign.volume(other_home, unlabelled)
        foreign.sandbox(name, unlabelled, mounts=(home,))

        recording = acting_for({slug: home}.get)
        info = recording.get_sandbox(name)
        assert info is not None and info.owner_unlabelled, "recreated once by the next run, to carry the label"
        assert name in {sandbox.name for sandbox in recording.list_sandboxes()}
        listed = {volume.name for volume in recording.list_volumes()}
        assert home in listed and other_home not in listed, "only the volume the state file names"
        with pytest.raises(OwnedByAnother, match="names no owner"):
            recording.get_volume(other_home)

        stranger = acting_for({slug: home_volume_name(new_slug())}.get)
        assert name not in {sandbox.name for sandbox in stranger.list_sandboxes()}
        assert home not in {volume.name for volume in stranger.list_volumes()}
        refusals: list[tuple[Callable[[], object], str]] = [
            (lambda: stranger.get_sandbox(name), f"`docker rm -f {name}`"),
            (lambda: stranger.remove_sandbox(name), f"`docker rm -f {name}`"),
            (lambda: stranger.remove_volume(home), f"`docker volume rm {home}`"),
        ]
        for attempt, by_hand in refusals:
            with pytest.raises(OwnedByAnother) as raised:
                attempt()
            assert raised.value.owner_uid is None and "made by an older opencode-sandbox" in raised.value.message
            assert f"If it is yours, remove it with {by_hand}" in (raised.value.hint or "")
        assert foreign.sandbox_exists(name) and foreign.volume_exists(home)
        acting_for({slug: home}.get).remove_sandbox(name)
        assert not foreign.sandbox_exists(name), "the recording user may remove it"

