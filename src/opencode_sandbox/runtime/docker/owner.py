"""The docker runtime's host user: the owner label of what it makes, and its refusals of what
another host user made (`core/ownership.py` decides; this module asks the engine and the system).

An object made by an older version has no owner label. It is this user's when this user's state
folder records it (`recorded_home`: the home volume the project's state file names): that home
volume itself, a VM or task sandbox that mounts it, and the project's network, egress proxy and
proxy CA volume while its VM is this user's (or, with no VM, while the state file names a home
volume). Everything else unlabelled is refused like another user's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import owner_labels, slug_of_home_volume, slug_of_task, slug_of_vm, vm_name
from opencode_sandbox.core.ownership import Claim, HostUser, judge, owner_uid
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import OwnedByAnother

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.engine.command import DockerCli

RecordedHome = Callable[[str], "str | None"]
"""The home volume this host user's state file records for a project slug, None when none."""


class Removal(Record):
    """How a refused object goes away: by its owner with this tool, or by hand with `docker`."""

    by_owner: str
    by_hand: str


_BY_OWNER_VM = "`opencode-sandbox kill --force` in their checkout"
_REMOVALS = {
    "VM": Removal(_BY_OWNER_VM, "`docker rm -f {name}` (home volumes stay)"),
    "task sandbox": Removal("`opencode-sandbox sandbox prune`", "`docker rm -f {name}`"),
    "home volume": Removal("`docker volume rm {name}` once they no longer need its files",
                           "`docker volume rm {name}` once you no longer need its files"),
    "egress proxy": Removal(_BY_OWNER_VM + " or `opencode-sandbox prune`", "`docker rm -f {name}`"),
    "proxy CA volume": Removal(_BY_OWNER_VM + " or `opencode-sandbox prune`", "`docker volume rm {name}`"),
    "network": Removal(_BY_OWNER_VM + " or `opencode-sandbox prune`", "`docker network rm {name}`"),
}


class DockerOwner:
    """The host user the docker runtime acts for (the process's uid unless told otherwise)."""

    def __init__(self, uid: int | None = None, recorded_home: RecordedHome | None = None) -> None:
        self.uid = os.getuid() if uid is None else uid
        self._recorded_home = recorded_home

    def labels(self) -> dict[str, str]:
        """What every object the runtime makes for a project carries besides its other labels."""
        return owner_labels(self.uid)

    def recorded_home(self, slug: str) -> str | None:
        return self._recorded_home(slug) if self._recorded_home is not None else None

    def of_container(self, name: str, labels: Mapping[str, str], mounted: Collection[str]) -> Claim:
        """A VM or task sandbox; unlabelled, it is this user's when it mounts the recorded home volume."""
        slug = slug_of_vm(name) or slug_of_task(name)

        def recorded() -> bool:
            home = self.recorded_home(slug) if slug is not None else None
            return home is not None and home in mounted

        return judge(labels, self.uid, recorded)

    def of_volume(self, name: str, labels: Mapping[str, str]) -> Claim:
        """A home volume; unlabelled, it is this user's when the state file names it."""
        slug = slug_of_home_volume(name)  # a work tree's volume is always labelled with its owner
        return judge(labels, self.uid, lambda: slug is not None and self.recorded_home(slug) == name)

    def of_piece(self, cli: DockerCli, slug: str, labels: Mapping[str, str]) -> Claim:
        """The project's network, egress proxy or proxy CA volume; unlabelled, it goes with the
        project's VM, or with the recorded home volume when the project has no VM."""

        def recorded() -> bool:
            documents = cli.inspect("container", [vm_name(slug)])
            vm = documents[0] if documents and str(documents[0].get("Name", "")).lstrip("/") == vm_name(slug) \
                else None
            if vm is None:
                return self.recorded_home(slug) is not None
            return self.of_container(vm_name(slug), _labels(vm), mounted_volumes(vm)).usable

        return judge(labels, self.uid, recorded)

    def require(self, what: str, name: str, claim: Claim, labels: Mapping[str, str]) -> None:
        """Raise `OwnedByAnother` unless `claim` lets this user use the object."""
        if claim.usable:
            return
        raise refusal(what, name, claim, owner_uid(labels), self.uid)

    def require_container(self, what: str, name: str, document: Mapping[str, Any]) -> Claim:
        labels = _labels(document)
        claim = self.of_container(name, labels, mounted_volumes(document))
        self.require(what, name, claim, labels)
        return claim

    def require_piece(self, cli: DockerCli, what: str, name: str, slug: str, document: Mapping[str, Any]) -> None:
        labels = _labels(document)
        self.require(what, name, self.of_piece(cli, slug, labels), labels)


def refusal(what: str, name: str, claim: Claim, owner: int | None, me: int) -> OwnedByAnother:
    """The error for an object of `claim` (OTHERS or UNKNOWN), whose owner label names `owner`."""
    removal = _REMOVALS[what]
    by_owner, by_hand = removal.by_owner.format(name=name), removal.by_hand.format(name=name)
    other_runtime = "or run yours with `--runtime microsandbox`, whose VMs are each host user's own"
    if claim is Claim.OTHERS:
        them = host_user(owner)
        return OwnedByAnother(
            f"the {what} {name} belongs to host user {them.describe()}, not to you, {host_user(me).describe()}",
            f"Host users with clones of the same remote share its names on one Docker engine. "
            f"{them.name or 'That user'} can remove it with {by_owner}; {other_runtime}.",
            owner_uid=owner)
    return OwnedByAnother(
        f"the {what} {name} was made by an older opencode-sandbox: it names no owner, and your state folder "
        "does not record it as yours",
        f"If another host user made it, their next `opencode-sandbox` run marks it as theirs, or they remove it "
        f"with {by_owner}. If it is yours, remove it with {by_hand} and run again; {other_runtime}.",
        owner_uid=owner)


def host_user(uid: int | None) -> HostUser:
    """The uid with its user name from the password database, where it has one."""
    if uid is None:
        return HostUser(None)
    import pwd

    try:
        return HostUser(uid, pwd.getpwuid(uid).pw_name)
    except KeyError:
        return HostUser(uid)


def mounted_volumes(document: Mapping[str, Any]) -> set[str]:
    """The named volumes a container mounts."""
    return {str(mount.get("Name")) for mount in document.get("Mounts") or []
            if isinstance(mount, Mapping) and mount.get("Type") == "volume"}


def _labels(document: Mapping[str, Any]) -> dict[str, str]:
    from opencode_sandbox.runtime.docker.parse import labels_of

    return labels_of(document)
