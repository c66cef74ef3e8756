"""Client leases: counted while held, gone when released or when their holder dies."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opencode_sandbox.core.attached_clients import AttachedClient
from opencode_sandbox.state.leases import (
    acquire_lease,
    attached_clients,
    client_lease,
    count_live_leases,
    leases_dir,
    release_lease,
    stop_guard,
)

SLUG = "demo-0123456789abcd"

HOLDER = """
import sys, subprocess
from pathlib import Path
from opencode_sandbox.state.leases import acquire_lease
lease = acquire_lease(Path(sys.argv[1]), sys.argv[2])
if sys.argv[3] == "with-child":
    child = subprocess.Popen(["sleep", "120"])
    print(child.pid, flush=True)
print("ready", flush=True)
sys.stdin.read()
"""


def start_holder(state_root: Path, mode: str = "alone") -> tuple[subprocess.Popen[str], int | None]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_root), SLUG, mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout is not None
    child = int(holder.stdout.readline()) if mode == "with-child" else None
    assert holder.stdout.readline().strip() == "ready"
    return holder, child


def test_a_lease_counts_until_released(tmp_path: Path) -> None:
    assert count_live_leases(tmp_path, SLUG) == 0
    first = acquire_lease(tmp_path, SLUG)
    second = acquire_lease(tmp_path, SLUG)
    assert count_live_leases(tmp_path, SLUG) == 2
    assert first.path.parent == leases_dir(tmp_path, SLUG)
    assert stat.S_IMODE(first.path.parent.stat().st_mode) == 0o700
    release_lease(first)
    assert count_live_leases(tmp_path, SLUG) == 1
    assert not first.path.exists()
    release_lease(second)
    assert count_live_leases(tmp_path, SLUG) == 0
    assert list(leases_dir(tmp_path, SLUG).iterdir()) == []


def test_the_context_manager_releases_even_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), client_lease(tmp_path, SLUG, "opencode-sandbox shell"):
        assert count_live_leases(tmp_path, SLUG) == 1
        [holder] = attached_clients(tmp_path, SLUG)
        assert holder.pid == os.getpid() and holder.command == "opencode-sandbox shell"
        raise RuntimeError("boom")
    assert count_live_leases(tmp_path, SLUG) == 0


def test_projects_have_separate_leases(tmp_path: Path) -> None:
    with client_lease(tmp_path, SLUG):
        assert count_live_leases(tmp_path, "other-0123456789abcd") == 0
        assert count_live_leases(tmp_path, SLUG) == 1


def test_a_killed_holder_no_longer_counts_and_its_file_is_removed(tmp_path: Path) -> None:
    holder, _ = start_holder(tmp_path)
    try:
        assert count_live_leases(tmp_path, SLUG) == 1
        leftover = list(leases_dir(tmp_path, SLUG).glob("*.lease"))
        assert len(leftover) == 1
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert leftover[0].exists()
    assert count_live_leases(tmp_path, SLUG) == 0
    assert not leftover[0].exists()


def test_a_child_of_the_holder_does_not_keep_the_lease_alive(tmp_path: Path) -> None:
    holder, child = start_holder(tmp_path, "with-child")
    assert child is not None
    try:
        assert count_live_leases(tmp_path, SLUG) == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert count_live_leases(tmp_path, SLUG) == 0
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_holder_that_exits_without_releasing_no_longer_counts(tmp_path: Path) -> None:
    holder, _ = start_holder(tmp_path)
    assert count_live_leases(tmp_path, SLUG) == 1
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0
    assert count_live_leases(tmp_path, SLUG) == 0


def test_unlocked_and_staging_files_are_not_leases(tmp_path: Path) -> None:
    folder = leases_dir(tmp_path, SLUG)
    folder.mkdir(parents=True)
    (folder / "123-abc.lease").write_text("123\n")
    (folder / ".456-def.new").write_text("456\n")
    assert count_live_leases(tmp_path, SLUG) == 0
    assert sorted(path.name for path in folder.iterdir()) == [".456-def.new"]


def test_a_lease_waits_while_a_stop_is_under_way(tmp_path: Path) -> None:
    order: list[str] = []
    leased = threading.Event()

    def attach() -> None:
        with client_lease(tmp_path, SLUG):
            order.append("leased")
            leased.set()

    with stop_guard(tmp_path, SLUG):
        attacher = threading.Thread(target=attach)
        attacher.start()
        time.sleep(0.3)
        assert count_live_leases(tmp_path, SLUG) == 0
        order.append("stopped")
    assert leased.wait(timeout=30)
    attacher.join(timeout=30)
    assert order == ["stopped", "leased"]


def test_a_lease_names_its_holder_its_command_and_when_it_attached(tmp_path: Path) -> None:
    before = time.time()
    first = acquire_lease(tmp_path, SLUG, "opencode-sandbox run --serve-only")
    second = acquire_lease(tmp_path, SLUG, "opencode-sandbox shell -- make test")
    holders = attached_clients(tmp_path, SLUG)
    assert [holder.command for holder in holders] == ["opencode-sandbox run --serve-only",
                                                       "opencode-sandbox shell -- make test"]
    assert {holder.pid for holder in holders} == {os.getpid()}
    assert all(holder.since is not None and before <= holder.since <= time.time() for holder in holders)
    release_lease(first)
    assert [holder.command for holder in attached_clients(tmp_path, SLUG)] == ["opencode-sandbox shell -- make test"]
    release_lease(second)


def test_a_lease_written_by_an_older_version_names_its_process(tmp_path: Path) -> None:
    holder, _ = start_holder(tmp_path)
    try:
        [path] = leases_dir(tmp_path, SLUG).glob("*.lease")
        path.write_text(f"{holder.pid}\n")  # the lock stays with the holder
        assert attached_clients(tmp_path, SLUG) == [AttachedClient(holder.pid)]
    finally:
        holder.communicate("")
    assert attached_clients(tmp_path, SLUG) == []
