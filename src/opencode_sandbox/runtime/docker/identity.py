"""Who `dev` is in a docker-runtime VM: never uid 0, and the owner of what the host user owns.

A container shares the host kernel's ids, so a bind-mounted checkout is writable by `dev` only
when their numbers match, and what `dev` creates is owned on the host by whatever uid it has.

- An ordinary host user: `dev` takes the user's uid and gid (as the devcontainers CLI does in an
  image layer; here in the container's own `/etc/passwd` and `/etc/group`, so no extra image is
  built or pruned) and the home volume's files are handed to them.
- A root host user: `dev` keeps the image's uid 1000, and every folder mounted (the checkout,
  the VM's git directory, `mounts` entries) is mounted through an id-mapped mount
  (`idmapped_mount`) that shows root's files as `dev`'s and writes `dev`'s as root's. uid 0 in
  the VM has no id there at all: it can create or take over nothing.

Both edits are made from outside the VM: the two files through the engine's copy into the
container, the home volume's owners by a short-lived helper container. The VM itself keeps no
capability for them (`docker_args.CONFINEMENT`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from opencode_sandbox.core.naming import LABEL_MANAGED, LABEL_PREFIX
from opencode_sandbox.engine.command import DockerCli, DockerFailed, first_line
from opencode_sandbox.errors import BootFailed
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec

DEV_HOME = "/home/dev"
WORK_TREE = "/workspace"
WORK_TREE_OWNER_SCRIPT = 'chown "$1:$2" /workspace'
"""A new work volume is empty: its top is all there is to hand over."""
IMAGE_DEV_IDS = (1000, 1000)
"""The runner image's `dev`."""
LABEL_MAPPED = LABEL_PREFIX + "mapped-mounts"
"""JSON: the host folders mounted through id-mapped mounts, by their index (`mapped_path`)."""

# $1 uid, $2 gid. Files root owns in the home stay root's, as the image made them, unless the home
# itself is root's: `dev` was uid 0 there (a root host user's VM of an earlier version).
HOME_OWNERS_SCRIPT = r"""
set -eu
uid=$1 gid=$2
if [ "$(stat -c %u /home/dev)" = 0 ]; then
  find /home/dev -xdev \( ! -uid "$uid" -o ! -gid "$gid" \) -exec chown -h "$uid:$gid" {} +
else
  find /home/dev -xdev ! -uid 0 \( ! -uid "$uid" -o ! -gid "$gid" \) -exec chown -h "$uid:$gid" {} +
fi
"""


def dev_ids(host_uid: int, host_gid: int) -> tuple[int, int]:
    """`dev`'s uid and gid in the VM for this host user."""
    return IMAGE_DEV_IDS if host_uid == 0 else (host_uid, host_gid)


def with_mapped_mounts(spec: SandboxSpec, host_uid: int) -> tuple[SandboxSpec, dict[str, str]]:
    """For a root host user, each host folder at its id-mapped place instead (a read-only one too,
    so root's private files there stay readable to `dev`), and the label that tells later starts
    what to mount there."""
    if host_uid != 0:
        return spec, {}
    from opencode_sandbox.runtime.docker.idmapped_mount import mapped_path

    mapped: dict[str, str] = {}
    mounts: list[Mount] = []
    for index, mount in enumerate(spec.mounts):
        if mount.kind is MountKind.BIND and Path(mount.source).is_dir():
            mapped[str(index)] = mount.source
            mount = mount._replace(source=str(mapped_path(spec.name, index)))
        mounts.append(mount)
    if not mapped:
        return spec, {}
    return spec._replace(mounts=tuple(mounts)), {LABEL_MAPPED: json.dumps(mapped, sort_keys=True)}


def ensure_mapped_mounts(name: str, labels: Mapping[str, str]) -> None:
    """The VM's id-mapped mounts in place before it starts (a reboot removes them)."""
    text = labels.get(LABEL_MAPPED)
    if not text:
        return
    from opencode_sandbox.runtime.docker import idmapped_mount  # ctypes, for a root host user's VM only

    uid, gid = IMAGE_DEV_IDS
    with idmapped_mount.held():
        for index, source in sorted(json.loads(text).items()):
            idmapped_mount.ensure_mapped(Path(source), idmapped_mount.mapped_path(name, int(index)),
                                         shown_uid=uid, shown_gid=gid)


def forget_mapped_mounts(name: str) -> None:
    from opencode_sandbox.runtime.docker import idmapped_mount

    idmapped_mount.unmount_all(name)


def renumbered(passwd: str, group: str, uid: int, gid: int) -> tuple[str, str] | None:
    """`/etc/passwd` and `/etc/group` with `dev` at `uid`:`gid`; None when there is no `dev`."""
    users = passwd.splitlines()
    groups = group.splitlines()
    found = False
    for number, line in enumerate(users):
        fields = line.split(":")
        if len(fields) >= 7 and fields[0] == "dev":
            fields[2], fields[3] = str(uid), str(gid)
            users[number] = ":".join(fields)
            found = True
    for number, line in enumerate(groups):
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == "dev":
            fields[2] = str(gid)
            groups[number] = ":".join(fields)
    return ("\n".join(users) + "\n", "\n".join(groups) + "\n") if found else None


def _archive(files: Mapping[str, str]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.uid, member.gid = len(data), 0o644, 0, 0
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def adopt(cli: DockerCli, name: str, image: str, home_volume: str | None, uid: int, gid: int,
          work_volume: str | None = None) -> None:
    """`dev` at `uid`:`gid` in the created VM, and its home volume's files handed to them (and the
    top of its own work tree, in the isolated mode)."""
    try:
        passwd = cli.run(["exec", "--user", "root", name, "cat", "/etc/passwd"])
        group = cli.run(["exec", "--user", "root", name, "cat", "/etc/group"])
        files = renumbered(passwd, group, uid, gid)
        if files is None:
            raise BootFailed(f"cannot start {name}: the runner image has no user `dev`",
                             hint="A runner image needs a `dev` user with its home in /home/dev.")
        if files != (passwd, group):
            cli.run(["cp", "-", f"{name}:/etc"], stdin=_archive({"passwd": files[0], "group": files[1]}))
        if work_volume is not None:
            owner = cli.run(["exec", "--user", "root", name, "stat", "-c", "%u:%g", WORK_TREE]).strip()
            if owner != f"{uid}:{gid}":
                cli.run(owners_args(image, work_volume, WORK_TREE, WORK_TREE_OWNER_SCRIPT, uid, gid), timeout_s=600)
        if home_volume is None:
            return
        owner = cli.run(["exec", "--user", "root", name, "stat", "-c", "%u:%g", DEV_HOME]).strip()
        if owner != f"{uid}:{gid}":
            cli.run(owners_args(image, home_volume, DEV_HOME, HOME_OWNERS_SCRIPT, uid, gid), timeout_s=600)
    except DockerFailed as failure:
        raise BootFailed(f"cannot start {name}: giving dev the ids {uid}:{gid} failed: {first_line(failure.stderr)}",
                         hint="The runner image needs a POSIX shell, find and chown; run again.") from None


def owners_args(image: str, volume: str, target: str, script: str, uid: int, gid: int) -> list[str]:
    """A helper that may change owners in one volume and nothing else."""
    return ["run", "--rm", "--pull=never", "--network", "none", "--user", "root",
            "--label", f"{LABEL_MANAGED}=helper",
            "--cap-drop", "ALL", "--cap-add", "CHOWN", "--cap-add", "DAC_READ_SEARCH",
            "--security-opt", "no-new-privileges",
            "--mount", f"type=volume,source={volume},target={target}",
            "--entrypoint", "sh", image, "-c", script, "owners", str(uid), str(gid)]


def volume_at(mounts: Sequence[Mount], target: str) -> str | None:
    return next((m.source for m in mounts if m.kind is MountKind.VOLUME and m.target == target), None)


def with_dev_home(user: str, env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """The exec's environment with `dev`'s HOME, whatever its uid resolves to."""
    if user != "dev":
        return env
    return {"HOME": DEV_HOME, **(env or {})}
