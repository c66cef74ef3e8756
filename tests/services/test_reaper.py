"""The idle reaper with the fake runtime, a fake daemon over HTTP and a fake monotonic clock."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.core.naming import managed_labels, runner_image, vm_name
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.types import SandboxSpec, SandboxStatus
from opencode_sandbox.services.reaper import (
    DaemonActivityReader,
    Reaper,
    ReaperLog,
    ReaperOutcome,
    Timing,
    run_exclusively,
)
from opencode_sandbox.services.reaper_settings import ReaperSettings, load_settings, settings_path
from opencode_sandbox.services.reaper_spawn import reaper_command, spawn_reaper
from opencode_sandbox.state.leases import Lease, acquire_lease, count_live_leases, release_lease
from opencode_sandbox.state_layout import StateLayout
from tests.fakes.runtime import FakeRuntime
from tests.fixtures.fake_daemon import Answer, FakeDaemon, fake_daemon
from tests.fixtures.opencode import free_port

SLUG = "demo-0123456789abcd"
VM = vm_name(SLUG)
TIMEOUT_S = 10.0
START = 1000.0
BUSY = {"ses_1": {"type": "busy"}}
GRACE_S = 30.0


class FakeClock:
    """A monotonic clock that only moves when the reaper sleeps; events fire at their time."""

    def __init__(self) -> None:
        self.now = START
        self.events: list[tuple[float, Callable[[], None]]] = []
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def at(self, offset: float, action: Callable[[], None]) -> None:
        self.events.append((START + offset, action))
        self.events.sort(key=lambda event: event[0])

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps += 1
        assert self.sleeps < 20_000, "the reaper never finished"
        self.now += seconds
        while self.events and self.events[0][0] <= self.now:
            _, action = self.events.pop(0)
            action()


class Setup:
    def __init__(self, root: Path, daemon: FakeDaemon) -> None:
        self.root = root
        self.daemon = daemon
        self.runtime = FakeRuntime(RuntimeKind.DOCKER)
        image = runner_image(SLUG, "0" * 12)
        self.runtime.add_docker_image(image)
        self.runtime.create_sandbox(SandboxSpec(VM, image, 1, 512, labels=managed_labels(SLUG)))
        self.runtime.guests.script_server(self.runtime, VM, running=True, answers=True)  # behind `daemon`
        self.settings = ReaperSettings(
            slug=SLUG,
            vm_name=VM,
            runtime_kind=RuntimeKind.DOCKER,
            daemon_url=daemon.url,
            timeout_s=TIMEOUT_S,
            mode=StopMode.WAIT_FOR_QUIESCENCE,
            max_retries=3,
            state_root=root,
            password="secret",
            generation="first",
        )
        self.clock = FakeClock()
        self.project = StateLayout(root).project(SLUG)
        self.log_path = self.project.reaper_log
        self.stopped_at: float | None = None
        self.leases: list[Lease] = []
        # Generous: a daemon that answers must not look hung on a loaded host. A test of a hung
        # daemon shortens it below the daemon's delay.
        self.reader_timeout_s = 5.0

    def run(self, wall_clock: Callable[[], datetime] | None = None, timing: Timing | None = None) -> ReaperOutcome:
        reader = DaemonActivityReader(lambda _message: None, timeout_s=self.reader_timeout_s)
        log = ReaperLog(self.project, wall_clock) if wall_clock else ReaperLog(self.project)
        original_stop = self.runtime.stop_sandbox

        def stop(name: str, timeout_s: float = 10.0) -> None:
            self.stopped_at = self.clock.now - START
            original_stop(name, timeout_s)

        self.runtime.stop_sandbox = stop  # type: ignore[method-assign]
        try:
            reaper = Reaper(lambda: self.settings, lambda _kind: self.runtime, reader, log,
                            timing or Timing(), self.clock, self.clock.sleep, guests=self.runtime.guests)
            return reaper.run()
        finally:
            reader.close()
            for lease in self.leases:
                release_lease(lease)

    def status(self) -> SandboxStatus:
        return self.runtime.sandboxes[VM].status

    def attach(self) -> None:
        self.leases.append(acquire_lease(self.root, SLUG))

    def detach(self) -> None:
        release_lease(self.leases.pop())

    def expect_running(self) -> None:
        assert self.status() is SandboxStatus.RUNNING

    def log_lines(self) -> list[str]:
        return [line.split("] ", 1)[1] for line in self.log_path.read_text().splitlines()]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with fake_daemon("secret") as daemon:
        daemon.set_activity({})
        yield Setup(tmp_path / "state", daemon)


def test_stops_after_the_timeout_when_sessions_are_quiet(setup: Setup) -> None:
    setup.clock.at(TIMEOUT_S - 0.5, setup.expect_running)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.status() is SandboxStatus.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= TIMEOUT_S
    assert setup.log_lines() == [
        f"watching {VM}: stop 10s after the last client leaves (wait mode: busy sessions hold the VM, "
        "except those asking a question or retried over 3 times)",
        "no client attached; stopping in 10s unless one attaches",
        f"stopping {VM}: all sessions are quiet",
        f"stopped {VM}",
    ]
    assert setup.daemon.requested("GET /session/status") >= 1


def test_a_stop_notes_where_the_vm_left_the_files_the_host_runs(setup: Setup) -> None:
    from opencode_sandbox.services.guard.store import GuardRecord, GuardStore

    checkout = setup.root / "checkout"
    (checkout / ".git" / "hooks").mkdir(parents=True)
    store = GuardStore(setup.root / SLUG)
    store.save(GuardRecord(str(checkout), (".git/hooks",), {}, vm_may_write=True, host_git=True), {})
    (checkout / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")  # by the VM

    assert setup.run() is ReaperOutcome.STOPPED

    record = store.load()
    assert record is not None and not record.vm_may_write
    assert record.at_stop is not None and list(record.at_stop) == [".git/hooks/pre-commit"]


def test_log_lines_carry_a_timestamp_and_the_process(setup: Setup) -> None:
    setup.run()
    first = setup.log_path.read_text().splitlines()[0]
    stamp, rest = first.split(" ", 1)
    assert datetime.fromisoformat(stamp).tzinfo is not None
    assert rest.startswith(f"[{os.getpid()}] watching {VM}")
    assert stat.S_IMODE(setup.log_path.stat().st_mode) == 0o600


def test_holds_while_a_session_is_busy_then_stops(setup: Setup) -> None:
    setup.daemon.set_activity(BUSY)
    for offset in (TIMEOUT_S + 1, 30, 59):
        setup.clock.at(offset, setup.expect_running)
    setup.clock.at(60, lambda: setup.daemon.set_activity({}))
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= 60
    holding = [line for line in setup.log_lines() if line.startswith("holding")]
    assert holding == [f"holding {VM}: sessions still working: ses_1 is busy"]


@pytest.mark.parametrize(
    ("states", "questions"),
    [
        ({"ses_1": {"type": "retry", "attempt": 4, "message": "overloaded", "next": 0}}, []),
        (BUSY, [{"id": "que_1", "sessionID": "ses_1", "questions": []}]),
        ({"ses_1": {"type": "idle"}}, []),
    ],
)
def test_stuck_retries_and_open_questions_do_not_hold(
    setup: Setup, states: dict[str, Any], questions: list[dict[str, Any]]
) -> None:
    setup.daemon.set_activity(states, questions)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at < TIMEOUT_S + 1


def test_an_unknown_state_holds_like_a_busy_one(setup: Setup) -> None:
    setup.daemon.set_activity({"ses_1": {"type": "pondering"}})
    setup.clock.at(40, lambda: setup.runtime.stop_sandbox(VM))
    assert setup.run() is ReaperOutcome.VM_GONE
    assert setup.stopped_at is not None and setup.stopped_at >= 40
    assert f'holding {VM}: sessions still working: ses_1 is in an unknown state ({{"type": "pondering"}}), ' \
           "counted as busy" in setup.log_lines()


def test_stop_immediately_mode_stops_despite_busy_sessions(setup: Setup) -> None:
    setup.daemon.set_activity(BUSY)
    setup.settings = setup.settings._replace(mode=StopMode.STOP_IMMEDIATELY)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and TIMEOUT_S <= setup.stopped_at < TIMEOUT_S + 1
    assert setup.daemon.requested("GET") == 0
    assert f"stopping {VM}: stop-immediately mode: sessions are not waited for" in setup.log_lines()


def test_a_client_that_attaches_cancels_the_stop(setup: Setup) -> None:
    setup.clock.at(5, setup.attach)
    setup.clock.at(30, setup.expect_running)
    setup.clock.at(30, setup.detach)
    setup.clock.at(30 + TIMEOUT_S - 1, setup.expect_running)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= 30 + TIMEOUT_S
    lines = setup.log_lines()
    assert "a client attached; the stop is cancelled" in lines
    assert lines.count("no client attached; stopping in 10s unless one attaches") == 2


def test_a_client_that_attaches_while_sessions_hold_cancels_too(setup: Setup) -> None:
    setup.daemon.set_activity(BUSY)
    setup.clock.at(20, setup.attach)
    setup.clock.at(25, lambda: setup.daemon.set_activity({}))
    setup.clock.at(50, setup.detach)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= 50 + TIMEOUT_S
    assert "a client attached; the stop is cancelled" in setup.log_lines()


def test_clients_attached_from_the_start_are_waited_for(setup: Setup) -> None:
    setup.attach()
    setup.attach()
    setup.clock.at(100, setup.detach)
    setup.clock.at(200, setup.detach)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= 200 + TIMEOUT_S
    lines = setup.log_lines()
    assert "2 client(s) attached; waiting for the last one to leave" in lines
    assert lines.index("2 client(s) attached; waiting for the last one to leave") < lines.index(
        "1 client(s) attached; waiting for the last one to leave"), "each client that leaves is logged"


class SlowWatch:
    """A look at the VM that takes `seconds` of the reaper's clock, once."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds, self.looked = clock, seconds, False

    def due(self) -> bool:
        return not self.looked

    def __call__(self, settings: object) -> None:
        self.looked = True
        self.clock.now += self.seconds


def run_with_watch(setup: Setup, watch: object) -> ReaperOutcome:
    """The reaper of `setup` with `watch` looking at the VM."""
    reader = DaemonActivityReader(lambda _message: None)
    try:
        reaper = Reaper(lambda: setup.settings, lambda _kind: setup.runtime, reader, ReaperLog(setup.project),
                        clock=setup.clock, sleep=setup.clock.sleep, watch=watch,  # type: ignore[arg-type]
                        guests=setup.runtime.guests)
        return reaper.run()
    finally:
        reader.close()


def test_a_slow_look_at_the_vm_is_logged_as_the_reason_a_stop_comes_late(setup: Setup) -> None:
    assert run_with_watch(setup, SlowWatch(setup.clock, 47)) is ReaperOutcome.STOPPED
    assert f"looking at {VM} took 47s" in setup.log_lines()


def test_quick_looks_at_the_vm_are_not_logged(setup: Setup) -> None:
    assert run_with_watch(setup, SlowWatch(setup.clock, 3)) is ReaperOutcome.STOPPED
    assert not any(line.startswith("looking at") for line in setup.log_lines())


def test_the_runtime_is_not_asked_while_a_client_is_attached(setup: Setup) -> None:
    """A reaper watches through whole sessions; it asks about the VM only once no client is left."""
    setup.attach()
    setup.clock.at(3600, setup.detach)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.runtime.calls.count(("get_sandbox", VM)) <= 1 + TIMEOUT_S // Timing().vm_check_s + 1
    assert setup.stopped_at is not None and setup.stopped_at >= 3600 + TIMEOUT_S


def test_a_new_detach_restarts_the_idle_timer(setup: Setup) -> None:
    setup.clock.at(8, lambda: setattr(setup, "settings", setup.settings._replace(generation="second")))
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= 8 + TIMEOUT_S
    assert "a client left again; the idle timer starts over" in setup.log_lines()


def test_a_vm_stopped_by_hand_ends_the_reaper(setup: Setup) -> None:
    setup.daemon.set_activity(BUSY)
    setup.clock.at(20, lambda: setup.runtime.stop_sandbox(VM))
    assert setup.run() is ReaperOutcome.VM_GONE
    assert setup.runtime.calls.count(("stop_sandbox", VM)) == 1
    assert setup.log_lines()[-1] == f"{VM} is stopped (stopped by other means); nothing to do"


def test_a_removed_vm_ends_the_reaper(setup: Setup) -> None:
    setup.clock.at(3, lambda: setup.runtime.remove_sandbox(VM))
    assert setup.run() is ReaperOutcome.VM_GONE
    assert setup.log_lines()[-1] == f"{VM} no longer exists; nothing to stop"


@pytest.mark.parametrize(
    ("break_daemon", "why"),
    [
        (lambda daemon: daemon.set("GET", "/session/status", Answer(200, b"<html/>", content_type="text/html")),
         "is not JSON"),
        (lambda daemon: setattr(daemon, "password", "changed"), "refused the password"),
        (lambda daemon: daemon.set("GET", "/session/status", Answer(200, b"{}", delay_s=1)), "did not answer"),
    ],
)
def test_an_unreadable_api_holds_and_says_why(
    setup: Setup, break_daemon: Callable[[FakeDaemon], None], why: str
) -> None:
    break_daemon(setup.daemon)
    if why == "did not answer":
        setup.reader_timeout_s = 0.3
    setup.clock.at(20, lambda: setup.runtime.stop_sandbox(VM))
    assert setup.run() is ReaperOutcome.VM_GONE
    assert setup.stopped_at == 20
    holding = [line for line in setup.log_lines() if line.startswith("holding")]
    assert len(holding) == 1
    assert holding[0].startswith(f"holding {VM}: the opencode API cannot be read (")
    assert why in holding[0]


def test_an_unreachable_daemon_holds(setup: Setup) -> None:
    setup.settings = setup.settings._replace(daemon_url=f"http://127.0.0.1:{free_port()}")
    setup.clock.at(30, setup.expect_running)
    setup.clock.at(30, lambda: setup.daemon.set_activity({}))
    setup.clock.at(31, lambda: setattr(setup, "settings", setup.settings._replace(daemon_url=setup.daemon.url)))
    assert setup.run() is ReaperOutcome.STOPPED
    assert any("cannot reach the opencode daemon" in line for line in setup.log_lines())
    assert setup.stopped_at is not None and setup.stopped_at >= 31


def _serve_process(setup: Setup, exit_code: int) -> None:
    """What `pgrep` answers in the VM: 0 opencode serve runs, 1 it does not, other: cannot tell."""
    setup.runtime.guests.script_server(setup.runtime, VM, {0: True, 1: False}.get(exit_code))


def test_no_serve_process_behind_an_unreachable_api_stops_at_once(setup: Setup) -> None:
    setup.settings = setup.settings._replace(daemon_url=f"http://127.0.0.1:{free_port()}")
    _serve_process(setup, 1)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and TIMEOUT_S <= setup.stopped_at < TIMEOUT_S + 1
    [stopping] = [line for line in setup.log_lines() if line.startswith("stopping")]
    assert stopping.startswith(f"stopping {VM}: opencode serve is not running in the VM (cannot reach")
    assert stopping.endswith("); no session can be working")


@pytest.mark.parametrize("pgrep_exit", [0, 127], ids=["serve runs", "cannot tell"])
def test_an_api_that_stays_unreadable_holds_for_the_grace_only(setup: Setup, pgrep_exit: int) -> None:
    setup.settings = setup.settings._replace(daemon_url=f"http://127.0.0.1:{free_port()}", unreadable_grace_s=GRACE_S)
    _serve_process(setup, pgrep_exit)
    setup.clock.at(TIMEOUT_S + GRACE_S - 1, setup.expect_running)
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and TIMEOUT_S + GRACE_S <= setup.stopped_at < TIMEOUT_S + GRACE_S + 3
    lines = setup.log_lines()
    holding = [line for line in lines if line.startswith("holding")]
    assert len(holding) == 1 and holding[0].endswith(f"; holding the VM for at most {GRACE_S:g}s")
    [stopping] = [line for line in lines if line.startswith("stopping")]
    assert stopping.startswith(f"stopping {VM}: the opencode API has not been readable for {GRACE_S:g}s (")


def test_an_answer_in_between_starts_the_grace_over(setup: Setup) -> None:
    unreachable = setup.settings._replace(daemon_url=f"http://127.0.0.1:{free_port()}", unreadable_grace_s=GRACE_S)
    setup.settings = unreachable
    _serve_process(setup, 0)
    setup.daemon.set_activity(BUSY)
    readable = unreachable._replace(daemon_url=setup.daemon.url)
    setup.clock.at(TIMEOUT_S + 20, lambda: setattr(setup, "settings", readable))
    setup.clock.at(TIMEOUT_S + 30, lambda: setattr(setup, "settings", unreachable))
    assert setup.run() is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and setup.stopped_at >= TIMEOUT_S + 30 + GRACE_S
    assert f"holding {VM}: sessions still working: ses_1 is busy" in setup.log_lines()


def test_a_runtime_that_stops_answering_is_logged_not_fatal(setup: Setup) -> None:
    setup.clock.at(1, lambda: setattr(setup.runtime, "engine_down", True))
    setup.clock.at(TIMEOUT_S - 1, lambda: setattr(setup.runtime, "engine_down", False))
    assert setup.run() is ReaperOutcome.STOPPED
    assert "cannot ask the runtime about " + VM + ": the engine is not answering" in setup.log_lines()


def test_a_failed_stop_is_logged(setup: Setup) -> None:
    setup.clock.at(TIMEOUT_S - 1, lambda: setattr(setup.runtime, "engine_down", True))
    assert setup.run() is ReaperOutcome.FAILED
    assert setup.log_lines()[-1] == f"stopping {VM} failed: the engine is not answering"


def test_a_wall_clock_jump_does_not_matter(setup: Setup) -> None:
    jumps = iter([timedelta(0), timedelta(days=-400), timedelta(hours=5), timedelta(days=3)])
    base = datetime(2030, 1, 1, tzinfo=UTC)

    def wall_clock() -> datetime:
        return base + next(jumps, timedelta(days=-1))

    setup.clock.at(TIMEOUT_S - 0.5, setup.expect_running)
    assert setup.run(wall_clock) is ReaperOutcome.STOPPED
    assert setup.stopped_at is not None and TIMEOUT_S <= setup.stopped_at < TIMEOUT_S + 1
    stamps = [line.split(" ", 1)[0] for line in setup.log_path.read_text().splitlines()]
    assert stamps[1].startswith("2028-")


def test_only_one_reaper_acts(tmp_path: Path) -> None:
    logged: list[str] = []
    inside = threading.Event()
    finish = threading.Event()
    results: list[ReaperOutcome | None] = []

    def first() -> ReaperOutcome:
        inside.set()
        assert finish.wait(timeout=30)
        return ReaperOutcome.STOPPED

    worker = threading.Thread(target=lambda: results.append(run_exclusively(tmp_path, SLUG, logged.append, first)))
    worker.start()
    try:
        assert inside.wait(timeout=30)
        second_ran: list[bool] = []

        def second() -> ReaperOutcome:
            second_ran.append(True)
            return ReaperOutcome.STOPPED

        assert run_exclusively(tmp_path, SLUG, logged.append, second) is None
        assert second_ran == []
        assert logged == ["another reaper already watches this project; leaving it to that one"]
    finally:
        finish.set()
        worker.join(timeout=30)
    assert results == [ReaperOutcome.STOPPED]


def test_a_second_reaper_process_exits_at_once(setup: Setup) -> None:
    outcome: list[ReaperOutcome | None] = []
    proceed = threading.Event()
    started = threading.Event()

    def hold() -> ReaperOutcome:
        started.set()
        assert proceed.wait(timeout=60)
        return ReaperOutcome.STOPPED

    holder = threading.Thread(target=lambda: outcome.append(run_exclusively(setup.root, SLUG, lambda _m: None, hold)))
    holder.start()
    try:
        assert started.wait(timeout=30)
        done = subprocess.run(reaper_command(setup.root, SLUG), capture_output=True, text=True, timeout=60)
    finally:
        proceed.set()
        holder.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert setup.log_lines() == ["another reaper already watches this project; leaving it to that one"]
    assert outcome == [ReaperOutcome.STOPPED]


def test_spawn_saves_private_settings_with_a_new_generation(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    class NoProcess:
        pid = 4242

        def __init__(self, argv: list[str], **_options: object) -> None:
            started.append(argv)

    monkeypatch.setattr(subprocess, "Popen", NoProcess)
    assert spawn_reaper(setup.settings) == 4242
    saved = load_settings(setup.root, SLUG)
    assert saved is not None
    assert saved.password == "secret"
    assert saved.generation not in ("", "first")
    assert saved._replace(generation="first") == setup.settings
    assert stat.S_IMODE(settings_path(setup.root, SLUG).stat().st_mode) == 0o600
    assert started == [[sys.executable, "-m", "opencode_sandbox.services.reaper",
                        "--state-root", str(setup.root), "--slug", SLUG]]


@pytest.mark.docker
def test_a_spawned_reaper_for_a_missing_vm_exits_and_logs(setup: Setup, unique: str) -> None:
    from tests.runtime.conftest import docker_answers

    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    slug = f"{unique}-0123456789abcd"
    settings = setup.settings._replace(slug=slug, vm_name=vm_name(slug))
    pid = spawn_reaper(settings)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    lines = [line.split("] ", 1)[1] for line in (setup.root / slug / "reaper.log").read_text().splitlines()]
    assert lines[-2:] == [f"{vm_name(slug)} no longer exists; nothing to stop", "done (vm-gone)"]
    assert count_live_leases(setup.root, slug) == 0


def test_the_settings_never_show_the_password(setup: Setup) -> None:
    shown = repr(setup.settings)
    assert "secret" not in shown
    assert "password='***'" in shown and f"slug='{SLUG}'" in shown


def test_the_stop_record_is_written_before_a_waiting_start_may_take_its_lease(
        setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start takes its lease under the stop guard, then records the guarded files as a VM may
    write them: the idle stop's record must come first, never on top of the start's."""
    import fcntl
    import os

    from opencode_sandbox.services.guard import reviews as guard
    from opencode_sandbox.state_layout import StateLayout

    guard_held: list[bool] = []

    def note(state_root: Path, slug: str, log: Callable[[str], None]) -> None:
        descriptor = os.open(StateLayout(state_root).project(slug).stop_lock, os.O_RDWR)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            guard_held.append(False)
        except BlockingIOError:
            guard_held.append(True)
        finally:
            os.close(descriptor)

    monkeypatch.setattr(guard, "note_vm_stopped", note)

    assert setup.run() is ReaperOutcome.STOPPED
    assert guard_held == [True]
