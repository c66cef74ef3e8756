from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from opencode_sandbox.core.quiescence import UNREADABLE_GRACE_S
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.services.reaper_settings import ReaperSettings, load_settings, save_settings
from opencode_sandbox.state.files import write_atomic
from opencode_sandbox.state.store import ProjectState, StateStore

SLUG = "demo-0123456789abcd"


def test_round_trip_with_private_permissions(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    state = ProjectState(home_volume="opencode-sandbox-home-x", image_digest="sha256:abc")
    store.save(SLUG, state)
    assert store.load(SLUG) == state
    path = store.state_path(SLUG)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert store.project_slugs() == [SLUG]


def test_a_project_stays_known_without_its_state_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.save(SLUG, ProjectState(home_volume="v1"))
    store.remove(SLUG)
    (tmp_path / "state" / "vm-ensure").mkdir()  # the lock folder is no project
    (tmp_path / "state" / "updater.yaml").write_text("{}")
    assert store.project_slugs() == [SLUG]
    assert store.load(SLUG) == ProjectState()


def test_a_built_project_is_known_without_a_state_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    assert store.project_slugs() == []
    store.know(SLUG)
    assert store.project_slugs() == [SLUG]
    assert stat.S_IMODE(store.project_dir(SLUG).stat().st_mode) == 0o700
    assert not store.state_path(SLUG).exists()


def test_missing_file_is_an_empty_state(tmp_path: Path) -> None:
    assert StateStore(tmp_path).load(SLUG) == ProjectState()


@pytest.mark.parametrize(
    "content", ["", "home_volume: [unclosed", "- a list\n", "just text", "\xff", "home_volume: {a: 1}\n"]
)
def test_corrupt_file_warns_and_starts_fresh(tmp_path: Path, content: str) -> None:
    warnings: list[str] = []
    store = StateStore(tmp_path, warn=warnings.append)
    path = store.state_path(SLUG)
    path.parent.mkdir(parents=True)
    path.write_bytes(content.encode("latin-1"))
    assert store.load(SLUG) == ProjectState()
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{path}: unusable state file (")
    assert warnings[0].endswith("); starting fresh")


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    path = store.state_path(SLUG)
    path.parent.mkdir(parents=True)
    path.write_text("home_volume: v1\nfuture_key: 3\n")
    assert store.load(SLUG) == ProjectState(home_volume="v1")


def test_atomic_write_never_leaves_a_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.yaml"
    write_atomic(target, "home_volume: old\n")

    def broken_fsync(_descriptor: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "home_volume: new\n")
    assert target.read_text() == "home_volume: old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.yaml"]


def test_reaper_settings_are_replaced_whole_without_waiting_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    write_atomic(tmp_path / "state.yaml", "home_volume: v\n")
    assert len(synced) == 1  # the project's state waits for the disk
    settings = ReaperSettings(slug=SLUG, vm_name="vm", runtime_kind=RuntimeKind.DOCKER,
                              daemon_url="http://127.0.0.1:1", timeout_s=60.0, mode=StopMode.WAIT_FOR_QUIESCENCE,
                              max_retries=3, state_root=tmp_path, password="pw")
    save_settings(settings)
    save_settings(settings._replace(timeout_s=120.0))
    assert len(synced) == 1  # the reaper's settings, rewritten at every detach, do not
    assert load_settings(tmp_path, SLUG) == settings._replace(timeout_s=120.0)
    assert sorted(p.name for p in (tmp_path / SLUG).iterdir()) == ["reaper.yaml"]


def test_concurrent_writers_leave_one_complete_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    volumes = [f"opencode-sandbox-home-{n}" for n in range(20)]
    threads = [
        threading.Thread(target=store.save, args=(SLUG, ProjectState(home_volume=v))) for v in volumes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.load(SLUG).home_volume in volumes
    assert [p.name for p in store.project_dir(SLUG).iterdir()] == ["state.yaml"]


def test_first_boot_lock_serialises(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    order: list[str] = []
    inside = threading.Event()
    release = threading.Event()

    def first() -> None:
        with store.first_boot_lock(SLUG):
            order.append("first in")
            inside.set()
            release.wait(5)
            order.append("first out")

    def second() -> None:
        inside.wait(5)
        with store.first_boot_lock(SLUG):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    inside.wait(5)
    release.set()
    for thread in threads:
        thread.join()
    assert order == ["first in", "first out", "second in"]
    lock = store.lock_path(SLUG)
    assert lock.parent == tmp_path / "vm-ensure"
    assert lock.name == f"{SLUG}.lock"


def test_the_reaper_keeps_its_grace_and_older_files_get_the_default(tmp_path: Path) -> None:
    settings = ReaperSettings(slug=SLUG, vm_name="vm", runtime_kind=RuntimeKind.DOCKER,
                              daemon_url="http://127.0.0.1:1", timeout_s=60.0, mode=StopMode.WAIT_FOR_QUIESCENCE,
                              max_retries=3, state_root=tmp_path, unreadable_grace_s=600.0)
    save_settings(settings)
    assert load_settings(tmp_path, SLUG) == settings
    path = tmp_path / SLUG / "reaper.yaml"
    older = json.loads(path.read_text())
    del older["unreadable_grace_s"]
    path.write_text(json.dumps(older))
    assert load_settings(tmp_path, SLUG) == settings._replace(unreadable_grace_s=UNREADABLE_GRACE_S)
