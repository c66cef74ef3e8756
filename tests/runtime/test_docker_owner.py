"""The docker runtime's host user: which objects are theirs, and what a refusal of another's says.
On the real engine: tests/runtime/ownership_contract.py and tests/e2e/test_host_users.py."""

from __future__ import annotations

import pwd
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, owner_labels, vm_name
from opencode_sandbox.core.ownership import Claim
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import OwnedByAnother
from opencode_sandbox.runtime.docker.owner import DockerOwner, host_user, mounted_volumes, refusal

SLUG = "web-0123456789abcd"
HOME = home_volume_name(SLUG, datetime(2030, 1, 1, tzinfo=UTC))
ME, STRANGER = 4242, 4343


class Containers(DockerCli):
    """An engine holding the given containers, by name."""

    def __init__(self, *documents: dict[str, Any]) -> None:
        super().__init__()
        self.documents = {str(document["Name"]).lstrip("/"): document for document in documents}

    def inspect(self, kind: str, names: Sequence[str]) -> list[dict[str, Any]]:
        assert kind == "container"
        return [self.documents[name] for name in names if name in self.documents]


def container(labels: dict[str, str], mounts: Sequence[str] = ()) -> dict[str, Any]:
    return {"Name": "/" + vm_name(SLUG), "Config": {"Labels": labels},
            "Mounts": [{"Type": "volume", "Name": name} for name in mounts] + [{"Type": "bind", "Source": "/x"}]}


def recording(home: str | None) -> DockerOwner:
    return DockerOwner(ME, {SLUG: home}.get if home else None)


def test_what_it_makes_carries_the_uid_it_acts_for() -> None:
    assert DockerOwner(ME).labels() == owner_labels(ME)


def test_a_container_without_the_label_is_this_users_when_it_mounts_the_recorded_home() -> None:
    unlabelled = managed_labels(SLUG)
    assert recording(HOME).of_container(vm_name(SLUG), unlabelled, {HOME}) is Claim.INHERITED
    assert recording(HOME).of_container(vm_name(SLUG), unlabelled, {HOME + "x"}) is Claim.UNKNOWN
    assert recording(None).of_container(vm_name(SLUG), unlabelled, {HOME}) is Claim.UNKNOWN
    assert recording(HOME).of_container(vm_name(SLUG), {**unlabelled, **owner_labels(STRANGER)}, {HOME}) \
        is Claim.OTHERS, "a label is never overruled by a record"
    assert mounted_volumes(container(unlabelled, [HOME])) == {HOME}


def test_a_home_volume_without_the_label_is_this_users_when_the_state_file_names_it() -> None:
    assert recording(HOME).of_volume(HOME, managed_labels(SLUG)) is Claim.INHERITED
    assert recording("opencode-sandbox-home-web-0123456789abcd-20200101T000000").of_volume(
        HOME, managed_labels(SLUG)) is Claim.UNKNOWN


@pytest.mark.parametrize(("vm_labels", "claim"), [
    ({**managed_labels(SLUG), **owner_labels(ME)}, Claim.INHERITED),
    ({**managed_labels(SLUG), **owner_labels(STRANGER)}, Claim.UNKNOWN),
    (managed_labels(SLUG), Claim.INHERITED),  # an older VM on the recorded home
])
def test_an_unlabelled_piece_goes_with_the_projects_vm(vm_labels: dict[str, str], claim: Claim) -> None:
    cli = Containers(container(vm_labels, [HOME]))
    assert recording(HOME).of_piece(cli, SLUG, managed_labels(SLUG)) is claim


def test_an_unlabelled_piece_of_a_project_without_a_vm_is_the_recording_users() -> None:
    assert recording(HOME).of_piece(Containers(), SLUG, managed_labels(SLUG)) is Claim.INHERITED
    assert recording(None).of_piece(Containers(), SLUG, managed_labels(SLUG)) is Claim.UNKNOWN


def test_require_raises_only_for_what_this_user_may_not_use() -> None:
    owner = DockerOwner(ME)
    owner.require("VM", vm_name(SLUG), Claim.MINE, owner_labels(ME))
    owner.require("VM", vm_name(SLUG), Claim.INHERITED, {})
    with pytest.raises(OwnedByAnother) as raised:
        owner.require("VM", vm_name(SLUG), Claim.OTHERS, owner_labels(STRANGER))
    assert raised.value.owner_uid == STRANGER


def test_a_refusal_of_another_users_object_names_them_and_what_to_do() -> None:
    error = refusal("VM", vm_name(SLUG), Claim.OTHERS, 0, ME)
    me = host_user(ME).describe()
    assert error.message == f"the VM {vm_name(SLUG)} belongs to host user root (uid 0), not to you, {me}"
    assert "root can remove it with `opencode-sandbox kill --force` in their checkout" in (error.hint or "")
    assert "`--runtime microsandbox`" in (error.hint or "") and error.owner_uid == 0


def test_a_refusal_of_a_volume_says_how_its_owner_removes_it() -> None:
    error = refusal("home volume", HOME, Claim.OTHERS, STRANGER, ME)
    assert f"belongs to host user {host_user(STRANGER).describe()}" in error.message
    assert f"`docker volume rm {HOME}` once they no longer need its files" in (error.hint or "")


def test_a_refusal_of_an_unrecorded_older_object_says_how_either_owner_resolves_it() -> None:
    error = refusal("VM", vm_name(SLUG), Claim.UNKNOWN, None, ME)
    assert error.message == (f"the VM {vm_name(SLUG)} was made by an older opencode-sandbox: it names no owner, "
                             "and your state folder does not record it as yours")
    assert "their next `opencode-sandbox` run marks it as theirs" in (error.hint or "")
    assert f"If it is yours, remove it with `docker rm -f {vm_name(SLUG)}` (home volumes stay)" in (error.hint or "")
    assert error.owner_uid is None


def test_host_users_are_named_from_the_password_database() -> None:
    assert host_user(0).name == pwd.getpwuid(0).pw_name
    assert host_user(None).uid is None
    unnamed = next(uid for uid in range(60000, 61000) if not _named(uid))
    assert host_user(unnamed).describe() == f"uid {unnamed}"


def _named(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
