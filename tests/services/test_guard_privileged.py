"""Nothing with privileges comes out of the VM: a set-user-ID or set-group-ID file, an executable
with file capabilities or a device node that appears in the checkout while a VM may write is
found by the one walk of the checkout, neutralised within a round, and told at the next review."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.cli.render import render_status
from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core.guard import OLD_REVIEW_FOLDER
from opencode_sandbox.core.guard_privileged import BLOCK_DEVICE, CAPABILITY_ATTRIBUTE, CHARACTER_DEVICE, FILE
from opencode_sandbox.services.guard import privileged as guard_privileged
from opencode_sandbox.services.guard import walk as guard_walk
from opencode_sandbox.services.guard.mounts import writable_folders
from opencode_sandbox.services.guard.moves import Notes, catch_while_running
from opencode_sandbox.services.guard.reviews import note_vm_stopped, review, status
from opencode_sandbox.services.guard.store import GuardStore
from tests.services.app_fakes import SLUG, messages
from tests.services.test_guard import git

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="only root may make a device node or set file capabilities")
CAP_SETUID = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)
"""A `security.capability` value (revision 2, effective) that grants CAP_SETUID."""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# privileged\n")
    git(root, "add", ".")
    assert git(root, "commit", "-q", "-m", "init").returncode == 0
    return root


def catch(app: App, log: list[str] | None = None) -> Notes:
    return catch_while_running(app.state.project_dir(SLUG).parent, SLUG, (log if log is not None else []).append)


def executable(path: Path, mode: int = 0o755, text: str = "#!/bin/sh\nid\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def with_capability(path: Path) -> Path:
    os.setxattr(path, CAPABILITY_ATTRIBUTE, CAP_SETUID, follow_symlinks=False)
    return path


def device(path: Path, kind: int = stat.S_IFBLK, major: int = 7, minor: int = 7) -> Path:
    os.mknod(path, kind | 0o666, os.makedev(major, minor))
    path.chmod(0o666)
    return path


def privileged_paths(root: Path) -> list[str]:
    return [found.path for found in guard_walk.walk_checkout(root, host_git=True).privileged]


def capability_of(path: Path) -> bytes:
    try:
        return os.getxattr(path, CAPABILITY_ATTRIBUTE, follow_symlinks=False)
    except OSError as error:
        assert error.errno == errno.ENODATA
        return b""


# the walk ----------------------------------------------------------------------------------


def test_the_walk_finds_set_id_files_and_leaves_ordinary_entries_and_links_alone(checkout: Path,
                                                                                   tmp_path: Path) -> None:
    executable(checkout / "bin" / "setuid", 0o4755)
    executable(checkout / "bin" / "setgid", 0o2711)
    executable(checkout / "bin" / "both", 0o6755)
    executable(checkout / "bin" / "plain", 0o755)
    executable(checkout / "data" / "not-runnable-setuid", 0o4644)
    (checkout / "shared").mkdir()
    (checkout / "shared").chmod(0o2775)  # a set-group-ID folder only passes its group on
    os.mkfifo(checkout / "fifo")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(checkout / "socket"))
    outside = executable(tmp_path / "outside-setuid", 0o4755)
    (checkout / "link-out").symlink_to(outside)
    (checkout / "link-in").symlink_to("bin/setuid")
    (checkout / "linked-folder").symlink_to(checkout / "bin")

    walked = guard_walk.walk_checkout(checkout, host_git=True)

    assert [(found.path, found.kind, found.mode) for found in walked.privileged] == [
        ("bin/both", FILE, 0o6755), ("bin/setgid", FILE, 0o2711), ("bin/setuid", FILE, 0o4755),
        ("data/not-runnable-setuid", FILE, 0o4644)]
    setuid = walked.privileged[2]
    found = os.stat(checkout / "bin" / "setuid")
    assert (setuid.uid, setuid.inode, setuid.changed_ns, setuid.capability) == (
        found.st_uid, found.st_ino, found.st_ctime_ns, "")
    assert walked.git_dirs == []


def test_the_walk_finds_git_directories_and_privileged_entries_inside_them_and_where_older_versions_kept_copies(
        checkout: Path) -> None:
    git(checkout, "init", "-q", str(checkout / "sub"))
    for part in ("HEAD", "objects", "refs"):
        (checkout / "bare" / part).mkdir(parents=True)
    executable(checkout / "bare" / "objects" / "hidden", 0o4755)
    executable(checkout / "sub" / ".git" / "hooks" / "setuid", 0o4755)
    (checkout / "worktree").mkdir()
    (checkout / "worktree" / ".git").write_text("gitdir: /elsewhere\n")
    kept = checkout / OLD_REVIEW_FOLDER / "20260101T000000Z" / "old"
    (kept / ".git").mkdir(parents=True)
    executable(kept / "setgid", 0o2755)
    executable(checkout / ".git" / "hooks" / "host-only", 0o4755)  # the host's own .git: not the VM's

    walked = guard_walk.walk_checkout(checkout, host_git=True)

    old_git = f"{OLD_REVIEW_FOLDER}/20260101T000000Z/old/.git"
    assert walked.git_dirs == [old_git, "bare", "sub/.git", "worktree/.git"], "nothing in the checkout is exempt"
    assert [found.path for found in walked.privileged] == [
        f"{OLD_REVIEW_FOLDER}/20260101T000000Z/old/setgid", "bare/objects/hidden", "sub/.git/hooks/setuid"]
    assert guard_walk.walk_checkout(checkout, host_git=False).git_dirs == [".git", old_git, "bare", "sub/.git",
                                                                           "worktree/.git"]


@AS_ROOT
def test_the_walk_finds_executables_with_capabilities_and_device_nodes(checkout: Path) -> None:
    with_capability(executable(checkout / "py", 0o755))
    with_capability(executable(checkout / "not-runnable", 0o644))  # a capability matters only on one
    device(checkout / "disk", stat.S_IFBLK, 7, 7)
    device(checkout / "null", stat.S_IFCHR, 1, 3)

    walked = guard_walk.walk_checkout(checkout, host_git=True)

    assert [(found.path, found.kind, found.device) for found in walked.privileged] == [
        ("disk", BLOCK_DEVICE, "7:7"), ("null", CHARACTER_DEVICE, "1:3"), ("py", FILE, "")]
    assert walked.privileged[2].capability == CAP_SETUID.hex()


# neutralising ------------------------------------------------------------------------------


def found_at(root: Path, path: str) -> guard_walk.Privileged:
    [found] = [each for each in guard_walk.walk_checkout(root, host_git=True).privileged if each.path == path]
    return found


def test_a_set_id_file_loses_both_bits_in_place(checkout: Path) -> None:
    hb = executable(checkout / "bin" / "hb", 0o6755)
    inode = hb.stat().st_ino

    caught = guard_privileged.neutralise(checkout, found_at(checkout, "bin/hb"))

    assert caught is not None and caught.done == "the bits were removed" and not caught.failed
    assert stat.S_IMODE(hb.stat().st_mode) == 0o755 and hb.stat().st_ino == inode
    assert hb.read_text() == "#!/bin/sh\nid\n"
    assert caught.line() == (f"the VM made bin/hb set-user-ID and set-group-ID (owner uid {os.geteuid()}, "
                             "mode 6755) while it ran: the bits were removed")


def test_a_file_swapped_for_a_link_between_the_walk_and_the_neutralising_is_not_touched(checkout: Path,
                                                                                          tmp_path: Path) -> None:
    planted = executable(checkout / "x", 0o4755)
    found = found_at(checkout, "x")
    outside = executable(tmp_path / "outside", 0o4755)
    planted.unlink()
    planted.symlink_to(outside)

    assert guard_privileged.neutralise(checkout, found) is None
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755, "the link was followed"
    assert planted.is_symlink()


def test_a_file_replaced_meanwhile_is_neutralised_when_it_is_privileged_too_and_left_when_it_is_not(
        checkout: Path) -> None:
    """A VM that swaps in a new file between every walk and neutralising must not slip through."""
    planted = executable(checkout / "x", 0o4755)
    found = found_at(checkout, "x")
    planted.rename(checkout / "old")
    executable(checkout / "x", 0o2711)

    caught = guard_privileged.neutralise(checkout, found)

    assert caught is not None and caught.found.mode == 0o2711 and caught.found.inode != found.inode
    assert privileged_paths(checkout) == ["old"]
    (checkout / "x").unlink()
    executable(checkout / "x", 0o755)
    assert guard_privileged.neutralise(checkout, found) is None


def test_an_entry_known_as_the_users_is_left_alone(checkout: Path) -> None:
    mine = executable(checkout / "mine", 0o4755)
    found = found_at(checkout, "mine")

    assert guard_privileged.neutralise(checkout, found, {found}) is None
    assert stat.S_IMODE(mine.stat().st_mode) == 0o4755


def test_a_folder_on_the_way_swapped_for_a_link_is_not_followed(checkout: Path, tmp_path: Path) -> None:
    executable(checkout / "bin" / "x", 0o4755)
    found = found_at(checkout, "bin/x")
    elsewhere = tmp_path / "elsewhere"
    executable(elsewhere / "x", 0o4755)
    shutil.rmtree(checkout / "bin")
    (checkout / "bin").symlink_to(elsewhere)

    assert guard_privileged.neutralise(checkout, found) is None
    assert stat.S_IMODE((elsewhere / "x").stat().st_mode) == 0o4755


@AS_ROOT
def test_a_capability_is_removed_and_a_device_node_unlinked(checkout: Path) -> None:
    py = with_capability(executable(checkout / "py", 0o4755))
    disk = device(checkout / "disk")

    by_path = {found.path: guard_privileged.neutralise(checkout, found)
               for found in guard_walk.walk_checkout(checkout, host_git=True).privileged}

    assert capability_of(py) == b"" and stat.S_IMODE(py.stat().st_mode) == 0o755
    assert not disk.exists() and not disk.is_symlink()
    assert by_path["py"] is not None and by_path["py"].done == "the bit was removed and its capabilities were removed"
    assert by_path["disk"] is not None and by_path["disk"].line() == (
        "the VM made disk a block device node 7:7 (owner uid 0, mode 0666) while it ran: it was removed (a device "
        "node is never restored)")


@AS_ROOT
def test_a_device_node_replaced_by_a_file_meanwhile_is_not_removed(checkout: Path) -> None:
    disk = device(checkout / "disk")
    found = found_at(checkout, "disk")
    disk.unlink()
    disk.write_text("a file now\n")

    assert guard_privileged.neutralise(checkout, found) is None
    assert disk.read_text() == "a file now\n"


@AS_ROOT
def test_as_a_host_user_who_may_not_change_them_files_are_replaced_by_copies_or_removed() -> None:
    """The host user is not root and the VM's root made the files: chmod and removexattr are
    refused, so a copy of the user's takes the place of a readable one, and one that can be
    neither changed nor read is removed."""
    nobody = 65534
    folder = Path(tempfile.mkdtemp(prefix="ocs-privileged-", dir="/tmp"))
    try:
        os.chown(folder, nobody, nobody)
        readable = executable(folder / "readable", 0o4755, "#!/bin/sh\nreadable\n")
        unreadable = executable(folder / "unreadable", 0o4711)
        capable = executable(folder / "capable", 0o755)
        os.chown(capable, nobody, nobody)  # the user's own file, with a capability only root may remove
        with_capability(capable)
        found = {each.path: each for each in guard_walk.walk_checkout(folder, host_git=True).privileged}

        done = _as_user(nobody, lambda: [guard_privileged.neutralise(folder, found[name]) for name in sorted(found)])

        assert done == ["it was replaced by a copy of yours without its privileges",
                        "it was replaced by a copy of yours without its privileges",
                        "it could be neither changed nor read, so it was removed"]
        assert readable.read_text() == "#!/bin/sh\nreadable\n" and readable.stat().st_uid == nobody
        assert stat.S_IMODE(readable.stat().st_mode) == 0o755
        assert capability_of(capable) == b"" and capable.stat().st_mode & 0o111
        assert not unreadable.exists()
        assert guard_walk.walk_checkout(folder, host_git=True).privileged == []
    finally:
        shutil.rmtree(folder)


def _as_user(uid: int, action: object) -> list[str]:
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(reading)
        status = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            caught = action()  # type: ignore[operator]
            os.write(writing, json.dumps([each.done if each else None for each in caught]).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        told = pipe.read()
    _, code = os.waitpid(child, 0)
    assert code == 0, "the neutralising as another user failed"
    result: list[str] = json.loads(told)
    return result


# while the VM runs, and the review --------------------------------------------------------


def test_a_set_id_file_the_vm_makes_loses_its_bits_within_one_round_and_is_told_at_the_review(
        app: App, checkout: Path, tmp_path: Path) -> None:
    mine = executable(checkout / "tools" / "mine", 0o4750)  # the user's, present at the record
    outside = executable(tmp_path / "outside", 0o4755)
    review(app, vm_may_write_after=True)  # the start
    planted = executable(checkout / "bin" / "h\x1b[2Kb", 0o6755)
    (checkout / "to-outside").symlink_to(outside)
    log: list[str] = []

    notes = catch(app, log)

    assert stat.S_IMODE(planted.stat().st_mode) == 0o755
    assert stat.S_IMODE(mine.stat().st_mode) == 0o4750, "the user's own was touched"
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755, "a link was followed"
    [caught] = notes.privileged
    line = caught.line()
    assert line.startswith("the VM made bin/h\\x1b[2Kb set-user-ID and set-group-ID (owner uid ")
    assert line.endswith("mode 6755) while it ran: the bits were removed") and "\x1b" not in line
    assert log == [line]
    shown = render_status(status(app), "table")
    assert f"  {line}" in shown and "chmod u+s PATH" in shown
    data = json.loads(render_status(status(app), "json"))["result"]
    assert data["state"] == "changed"
    assert data["privileged"][0]["found"]["mode"] == 0o6755 and data["privileged"][0]["told"] == line

    review(app, vm_may_write_after=True)  # the detach

    said = messages(app)
    assert "1 privileged file(s) or device node(s) the VM made below the checkout lost their privileges" in said
    assert line in said and "a removed device node is not restored" in said
    assert catch(app) == Notes(), "told once, and nothing new"
    assert "privileged" not in render_status(status(app), "table").split("state: ")[1]


@AS_ROOT
def test_a_device_node_and_a_capability_the_vm_makes_are_caught_and_one_present_at_the_record_is_left(
        app: App, checkout: Path) -> None:
    mine = with_capability(executable(checkout / "mine", 0o755))
    review(app, vm_may_write_after=True)
    disk = device(checkout / "disk")
    python = with_capability(executable(checkout / "python3", 0o755))

    notes = catch(app)

    assert not disk.exists() and capability_of(python) == b""
    assert capability_of(mine) == CAP_SETUID
    assert [(each.found.path, each.done) for each in notes.privileged] == [
        ("disk", "it was removed (a device node is never restored)"),
        ("python3", "its capabilities were removed")]


@AS_ROOT
def test_a_privileged_file_that_cannot_be_neutralised_is_told_loudly_at_every_review_and_never_recorded(
        app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    planted = executable(checkout / "x y", 0o4755)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(planted)], capture_output=True).returncode != 0:
        pytest.skip("an immutable file (chattr +i), which not even root may change, cannot be made here")
    log: list[str] = []
    try:
        catch(app, log)
        catch(app, log)

        assert stat.S_IMODE(planted.stat().st_mode) == 0o4755
        assert len(log) == 1, "noted once, however many rounds find it"
        assert "could NOT be neutralised (Operation not permitted)" in log[0]
        assert log[0].endswith(f"do it by hand now: chmod u-s,g-s -- '{planted}'")

        review(app, vm_may_write_after=False)  # the stop
        review(app, vm_may_write_after=True)  # the next start: no VM could write, yet it is not the user's

        assert messages(app).count("could NOT be neutralised") == 2
        record = GuardStore(app.state.project_dir(SLUG)).load()
        assert record is not None and record.privileged == ()
    finally:
        subprocess.run([chattr, "-i", str(planted)], check=True)
    catch(app)
    assert stat.S_IMODE(planted.stat().st_mode) == 0o755


def test_what_the_vm_makes_between_the_last_round_and_the_stop_is_caught_at_the_stop(app: App,
                                                                                   checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    planted = executable(checkout / "late", 0o2755)

    note_vm_stopped(app.state.project_dir(SLUG).parent, SLUG)
    review(app, vm_may_write_after=True)  # the next start

    assert stat.S_IMODE(planted.stat().st_mode) == 0o755
    assert "the VM made late set-group-ID" in messages(app)


def test_privileged_files_made_with_no_vm_running_are_the_users(app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=False)
    mine = executable(checkout / "mine", 0o4755)

    review(app, vm_may_write_after=True)
    catch(app)

    assert stat.S_IMODE(mine.stat().st_mode) == 0o4755
    record = GuardStore(app.state.project_dir(SLUG)).load()
    assert record is not None and [found.path for found in record.privileged] == ["mine"]


def test_a_folder_mounted_writable_is_watched_like_the_checkout(app: App, tmp_path: Path) -> None:
    shared, readonly = tmp_path / "shared", tmp_path / "readonly"
    mine = executable(shared / "mine", 0o4750)  # the user's, present at the record
    executable(readonly / "theirs", 0o4755)
    (tmp_path / "shared-link").symlink_to(shared)
    app.settings = load_settings([], {}, {"mounts": [f"{tmp_path / 'shared-link'}:/mnt/shared:rw",
                                                     f"{readonly}:/mnt/ro", f"{mine}:/mnt/one-file:rw"]})
    assert writable_folders(app.settings) == (str(shared),), "a link resolved; read-only and file mounts left out"
    review(app, vm_may_write_after=True)  # the start
    planted = executable(shared / "deep" / "planted", 0o2755)
    log: list[str] = []

    notes = catch(app, log)

    assert stat.S_IMODE(planted.stat().st_mode) == 0o755
    assert stat.S_IMODE(mine.stat().st_mode) == 0o4750, "the user's own was touched"
    [caught] = notes.privileged
    assert caught.line().startswith(f"the VM made {shared}/deep/planted set-group-ID (owner uid ")
    assert log == [caught.line()]
    review(app, vm_may_write_after=False)  # the detach tells it
    assert f"the VM made {shared}/deep/planted set-group-ID" in messages(app)
    executable(shared / "later", 0o4755)  # with no VM running: the user's own
    review(app, vm_may_write_after=True)
    assert catch(app) == Notes()
    assert stat.S_IMODE((shared / "later").stat().st_mode) == 0o4755


def test_a_tree_deeper_than_any_recursion_is_walked_and_its_privileged_file_caught(app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    deep = checkout
    for _ in range(1500):  # os.makedirs itself recurses once a level
        deep = deep / "d"
        deep.mkdir()
    planted = executable(deep / "sh", 0o4755)
    beside = executable(checkout / "beside", 0o4755)

    try:
        notes = catch(app)

        assert {caught.found.path.rsplit("/", 1)[-1] for caught in notes.privileged} == {"sh", "beside"}
        assert stat.S_IMODE(planted.stat().st_mode) == stat.S_IMODE(beside.stat().st_mode) == 0o755
    finally:  # bottom up: shutil.rmtree, which pytest cleans with, recurses once a level too
        planted.unlink()
        while deep != checkout:
            deep.rmdir()
            deep = deep.parent


def test_a_folder_the_vm_made_unreadable_is_opened_again_and_walked(app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    hidden = checkout / "hidden"
    planted = executable(hidden / "sh", 0o4755)
    hidden.chmod(0o111)
    try:
        notes = catch(app)
        assert [caught.found.path for caught in notes.privileged] == ["hidden/sh"]
        assert stat.S_IMODE(planted.stat().st_mode) == 0o755
        assert guard_walk.walk_checkout(checkout, host_git=True).unwalked == []
    finally:
        hidden.chmod(0o755)
