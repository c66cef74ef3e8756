"""Who `dev` is in a docker-runtime VM: the passwd edit, the mapped mounts of a root host user, and
a real id-mapped mount where the tests run as root."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.runtime.docker import idmapped_mount
from opencode_sandbox.runtime.docker.identity import (
    HOME_OWNERS_SCRIPT,
    LABEL_MAPPED,
    WORK_TREE_OWNER_SCRIPT,
    dev_ids,
    owners_args,
    renumbered,
    with_mapped_mounts,
)
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec

PASSWD = "root:x:0:0:root:/root:/bin/bash\ndev:x:1000:1000::/home/dev:/bin/bash\n"
GROUP = "root:x:0:\ndev:x:1000:\nusers:x:100:dev\n"


def test_dev_is_never_uid_0() -> None:
    assert dev_ids(0, 0) == (1000, 1000)
    assert dev_ids(1001, 1002) == (1001, 1002)


def test_renumbered_changes_dev_alone() -> None:
    files = renumbered(PASSWD, GROUP, 1001, 1002)
    assert files == ("root:x:0:0:root:/root:/bin/bash\ndev:x:1001:1002::/home/dev:/bin/bash\n",
                     "root:x:0:\ndev:x:1002:\nusers:x:100:dev\n")
    assert renumbered(PASSWD, GROUP, 1000, 1000) == (PASSWD, GROUP)
    assert renumbered("root:x:0:0:root:/root:/bin/bash\n", GROUP, 1001, 1001) is None


def _spec(*mounts: Mount) -> SandboxSpec:
    return SandboxSpec(name="opencode-sandbox-vm-a-0123456789abcd", image="img", cpus=1, memory_mib=512,
                       mounts=mounts)


def test_a_root_host_user_mounts_every_folder_mapped(tmp_path: Path) -> None:
    checkout, shared, readonly = tmp_path / "checkout", tmp_path / "shared", tmp_path / "ro"
    for folder in (checkout, shared, readonly):
        folder.mkdir()
    (tmp_path / "file").write_text("")
    spec = _spec(Mount(MountKind.VOLUME, "home", "/home/dev"), Mount(MountKind.BIND, str(checkout), "/workspace"),
                 Mount(MountKind.BIND, str(readonly), "/workspace/.x", readonly=True),
                 Mount(MountKind.BIND, str(tmp_path / "file"), "/etc/x"),
                 Mount(MountKind.BIND, str(shared), "/mnt/shared"))
    assert with_mapped_mounts(spec, 1001) == (spec, {})
    mapped, labels = with_mapped_mounts(spec, 0)
    sources = [mount.source for mount in mapped.mounts]
    assert sources == ["home", str(idmapped_mount.mapped_path(spec.name, 1)),
                       str(idmapped_mount.mapped_path(spec.name, 2)), str(tmp_path / "file"),
                       str(idmapped_mount.mapped_path(spec.name, 4))]
    assert [mount.readonly for mount in mapped.mounts] == [False, False, True, False, False]
    assert json.loads(labels[LABEL_MAPPED]) == {"1": str(checkout), "2": str(readonly), "4": str(shared)}


def test_the_home_helper_may_change_owners_and_nothing_else() -> None:
    for volume, target, script in (("home-vol", "/home/dev", HOME_OWNERS_SCRIPT),
                                   ("work-vol", "/workspace", WORK_TREE_OWNER_SCRIPT)):
        args = owners_args("img", volume, target, script, 1001, 1001)
        joined = " ".join(args)
        assert "--cap-drop ALL --cap-add CHOWN --cap-add DAC_READ_SEARCH" in joined
        assert "--network none" in joined and "no-new-privileges" in joined
        assert f"type=volume,source={volume},target={target}" in args
        assert args[-2:] == ["1001", "1001"]
        assert script in args


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make mounts")
def test_an_id_mapped_mount_shows_roots_files_as_devs_and_maps_nothing_else(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "root-owned").write_text("r")
    (source / "someone-elses").write_text("s")
    os.chown(source / "someone-elses", 1234, 1234)
    vm = f"opencode-sandbox-vm-test-{os.getpid()}"
    target = idmapped_mount.mapped_path(vm, 0)
    try:
        idmapped_mount.ensure_mapped(source, target, shown_uid=1000, shown_gid=1000)
        assert idmapped_mount.is_mounted(target)
        idmapped_mount.ensure_mapped(source, target, shown_uid=1000, shown_gid=1000)  # already there: kept
        assert (os.stat(target / "root-owned").st_uid, os.stat(target / "root-owned").st_gid) == (1000, 1000)
        assert os.stat(target / "someone-elses").st_uid == 65534, "an unmapped owner shows as nobody"
        for folder in (target.parent, idmapped_mount.MOUNTS_ROOT, idmapped_mount.MOUNTS_ROOT.parent):
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, f"{folder} is reachable by others"
        from_outside = subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "ls", target],
                                      capture_output=True, text=True, check=False)
        assert from_outside.returncode != 0, "a host user with dev's uid reached root's files through the mount"
        assert _as_uid_1000_in(target, "by-dev", "dev\n") and _as_uid_1000_in(target, "root-owned", "more\n")
        assert (os.stat(source / "by-dev").st_uid, os.stat(source / "by-dev").st_gid) == (0, 0)
        with pytest.raises(OSError):  # uid 0 has no id through the mount
            (target / "by-root").write_text("x")
        moved = tmp_path / "moved"
        moved.mkdir()
        (moved / "elsewhere").write_text("e")
        idmapped_mount.ensure_mapped(moved, target, shown_uid=1000, shown_gid=1000)
        assert sorted(os.listdir(target)) == ["elsewhere"], "a mount of another folder is replaced"
    finally:
        idmapped_mount.unmount_all(vm)
    assert not idmapped_mount.is_mounted(target)
    assert not target.parent.exists()
    assert (source / "root-owned").read_text() == "rmore\n", "unmounting leaves the files alone"


def _as_uid_1000_in(folder: Path, name: str, text: str) -> bool:
    """Appends `text` to `name` in `folder` as uid 1000, as dev in the VM would: through a descriptor of
    the folder opened here, which a bind mount in the VM stands for."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    child = os.fork()
    if child == 0:
        try:
            os.setgroups([])
            os.setgid(1000)
            os.setuid(1000)
            handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644, dir_fd=descriptor)
            os.write(handle, text.encode())
            os._exit(0)
        except OSError:
            os._exit(1)
    os.close(descriptor)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
