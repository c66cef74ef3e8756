"""The idle reaper: stops a project VM once no client is attached and its sessions are quiet.

One detached process per project (`python -m opencode_sandbox.services.reaper --state-root
DIR --slug SLUG`, started by `spawn_reaper`) holds the reaper's lock and forks the process that
watches (`supervised`): when that one dies, the first stops the VM. The watching process watches
the client leases. When none is left
it waits `auto-stop-timeout` on the monotonic clock, then, in wait mode, polls the daemon
until no session is working, and stops the VM gracefully. A daemon whose API cannot be read
holds the VM only while its process runs, and for at most `ReaperSettings.unreadable_grace_s`
(`daemon-start-timeout`, at least 60 s). A client that attaches meanwhile cancels the stop; a VM
stopped by other means ends the reaper. Every decision goes to `<state_root>/<slug>/reaper.log`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.collector import collect_from_now_on
from opencode_sandbox.core.agents import DEFAULT_AGENT
from opencode_sandbox.core.quiescence import (
    DaemonActivity,
    StopDecision,
    UnreadableApi,
    decide_stop,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.errors import NotFound, SandboxError
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.types import SandboxStatus
from opencode_sandbox.services.guard import watch_failure
from opencode_sandbox.services.guard.watch_failure import WatchFailed
from opencode_sandbox.services.reaper_settings import (
    ReaperSettings,
    load_settings,
    settings_path,
)
from opencode_sandbox.services.reaper_spawn import reaper_lock
from opencode_sandbox.state.files import UnreadableState, ensure_private_dir
from opencode_sandbox.state.leases import count_live_leases, stop_guard
from opencode_sandbox.state_layout import ProjectLayout, StateLayout

if TYPE_CHECKING:
    from opencode_sandbox.daemon.client import DaemonClient
    from opencode_sandbox.guest.operations import GuestFactory
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.services.guard.live_watch import LiveWatch
    from opencode_sandbox.services.reaper_looks import LookServer

MAX_LOG_BYTES = 512 * 1024
_STILL_UP = (SandboxStatus.RUNNING, SandboxStatus.STARTING, SandboxStatus.DRAINING, SandboxStatus.UNKNOWN)

ActivityReader = Callable[[ReaperSettings], DaemonActivity]
"""Everything the daemon is doing; raises `DaemonError` when its API cannot be read."""


class Watch(Protocol):
    """What runs every few seconds while the VM runs (`LiveWatch`), and once before a stop."""

    def due(self) -> bool: ...
    def __call__(self, settings: ReaperSettings) -> None: ...


class ReaperOutcome(StrEnum):
    STOPPED = "stopped"
    VM_GONE = "vm-gone"
    FAILED = "failed"
    STOPPED_BLIND = "stopped-blind"
    """Stopped at once: the watch could not look at what the VM changes (`WatchFailed`)."""


class Timing(Record):
    poll_s: float = 0.5
    """How often leases are counted."""
    daemon_poll_s: float = 2.0
    """How often the daemon is asked again while sessions hold the VM."""
    vm_check_s: float = 5.0
    """How often the runtime is asked whether the VM still runs."""
    slow_round_s: float = 20.0
    """A round of looks at the VM (the guard, the git sync, the agent's state) this long is logged."""


DEFAULT_TIMING = Timing()


class ReaperLog:
    """Appends `<local time with offset> <message>` lines to the project's reaper log; starts
    afresh past MAX_LOG_BYTES, keeping the one before."""

    def __init__(self, project: ProjectLayout,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now().astimezone()) -> None:
        self.path = path = project.reaper_log
        self._wall_clock = wall_clock
        ensure_private_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size > MAX_LOG_BYTES:
                os.replace(path, project.earlier_reaper_log)

    def __call__(self, message: str) -> None:
        from opencode_sandbox.core.guard import shown

        message = shown(message)  # what the VM printed reaches it (a sync's error): no control character
        stamp = self._wall_clock().isoformat(timespec="seconds")
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
            handle.write(f"{stamp} [{os.getpid()}] {message}\n")


class Reaper:
    """The watching loop; every collaborator is passed in."""

    def __init__(
        self,
        settings: Callable[[], ReaperSettings],
        runtime: Callable[[RuntimeKind], Runtime],
        read_activity: ActivityReader,
        log: Callable[[str], None],
        timing: Timing = DEFAULT_TIMING,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        watch: Watch | None = None,
        guests: GuestFactory | None = None,
        attention: Watch | None = None,
    ) -> None:
        self._watch = watch
        self._attention = attention
        self._guests = guests
        self._settings = settings
        self._runtime = runtime
        self._read_activity = read_activity
        self._log = log
        self._timing = timing
        self._clock = clock
        self._sleep = sleep
        self._runtime_trouble: str | None = None
        self._unreadable_since: float | None = None

    def run(self) -> ReaperOutcome:
        collect_from_now_on()  # the watch may last for days, polling the daemon all along
        current = self._settings()
        self._log(
            f"watching {current.vm_name}: stop {current.timeout_s:g}s after the last client leaves "
            f"({_mode_text(current.mode, current.max_retries)})"
        )
        generation = current.generation
        idle_since: float | None = None
        clients_seen = 0
        decision: StopDecision | None = None
        held_for = ""
        next_vm_check = self._clock()
        next_daemon_poll = next_vm_check
        while True:
            now = self._clock()
            current = self._settings()
            renewed = current.generation != generation
            if renewed:
                generation = current.generation
                if idle_since is not None:
                    self._log("a client left again; the idle timer starts over")
                idle_since, decision, held_for = None, None, ""
                self._unreadable_since = None
            if self._watch is not None and (renewed or self._watch.due()):
                try:
                    self._watch(current)
                except WatchFailed as failure:
                    return self._fail_closed(current, failure.reason)
            if self._attention is not None and self._attention.due():
                self._signal_attention(current)
            looked_for = self._clock() - now
            if looked_for >= self._timing.slow_round_s:  # the reason a stop comes late, in the log
                self._log(f"looking at {current.vm_name} took {looked_for:.0f}s")
            clients = count_live_leases(current.state_root, current.slug)
            # While clients are attached the VM is theirs; a stop by other means cuts them off.
            if not clients and now >= next_vm_check:
                next_vm_check = now + self._timing.vm_check_s
                gone = self._vm_gone(current)
                if gone is not None:
                    self._log(gone)
                    return ReaperOutcome.VM_GONE
            if clients:
                if idle_since is not None:
                    self._log("a client attached; the stop is cancelled")
                elif clients != clients_seen:
                    self._log(f"{clients} client(s) attached; waiting for the last one to leave")
                clients_seen = clients
                idle_since, decision, held_for = None, None, ""
                next_vm_check = now  # asked at once when the last one leaves
                self._unreadable_since = None
                self._sleep(self._timing.poll_s)
                continue
            clients_seen = 0
            if idle_since is None:
                idle_since = now
                self._log(f"no client attached; stopping in {current.timeout_s:g}s unless one attaches")
            remaining = idle_since + current.timeout_s - now
            if remaining > 0:
                self._sleep(min(self._timing.poll_s, remaining))
                continue
            if decision is None or (not decision.stop and now >= next_daemon_poll):
                decision = self._decide(current)
                next_daemon_poll = now + self._timing.daemon_poll_s
                if not decision.stop and decision.reason != held_for:
                    held_for = decision.reason
                    self._log(f"holding {current.vm_name}: {decision.reason}")
            if not decision.stop:
                self._sleep(self._timing.poll_s)
                continue
            outcome = self._stop(current, decision)
            if outcome is not None:
                return outcome
            idle_since, decision, held_for = None, None, ""
            self._unreadable_since = None

    def _signal_attention(self, current: ReaperSettings) -> None:
        """Whatever fails in the signal to the user, the watch over the VM goes on."""
        assert self._attention is not None
        try:
            self._attention(current)
        except Exception as error:  # the guard's rounds and the stop must outlive it
            self._log(f"the signal when the agent needs you failed: {error!r}")

    def _decide(self, current: ReaperSettings) -> StopDecision:
        from opencode_sandbox.daemon.errors import DaemonError

        if current.mode is StopMode.STOP_IMMEDIATELY:
            return decide_stop(DaemonActivity({}), current.mode, current.max_retries)
        try:
            activity = self._read_activity(current)
        except DaemonError as error:
            failed_at = self._clock()
            if self._unreadable_since is None:
                self._unreadable_since = failed_at
            unreadable = UnreadableApi(error.message, self._serve_running(current), failed_at - self._unreadable_since)
            return decide_stop(unreadable, current.mode, current.max_retries, current.unreadable_grace_s)
        self._unreadable_since = None
        return decide_stop(activity, current.mode, current.max_retries)

    def _serve_running(self, current: ReaperSettings) -> bool | None:
        """Whether `opencode serve` runs in the VM; None when the VM cannot tell (and for a
        terminal agent, which has no server)."""
        from opencode_sandbox.guest.shell import ShellGuest

        if current.agent != DEFAULT_AGENT:
            return None
        guests = self._guests or ShellGuest
        try:
            return guests(self._runtime(current.runtime_kind), current.vm_name).server_running()
        except SandboxError:
            return None

    def _vm_gone(self, current: ReaperSettings) -> str | None:
        """Why there is nothing left to watch, None while the VM runs (or cannot be asked about)."""
        try:
            info = self._runtime(current.runtime_kind).get_sandbox(current.vm_name)
        except SandboxError as error:
            if error.message != self._runtime_trouble:
                self._runtime_trouble = error.message
                self._log(f"cannot ask the runtime about {current.vm_name}: {error.message}")
            return None
        self._runtime_trouble = None
        if info is None:
            return f"{current.vm_name} no longer exists; nothing to stop"
        if info.status not in _STILL_UP:
            return f"{current.vm_name} is {info.status.value} (stopped by other means); nothing to do"
        return None

    def _stop(self, current: ReaperSettings, decision: StopDecision) -> ReaperOutcome | None:
        """Stop unless a client attached at the last moment (then None)."""
        with stop_guard(current.state_root, current.slug):
            if count_live_leases(current.state_root, current.slug):
                self._log("a client attached; the stop is cancelled")
                return None
            self._log(f"stopping {current.vm_name}: {decision.reason}")
            if self._watch is not None:
                try:
                    self._watch(current)  # the last commits reach the host before the VM goes
                except WatchFailed as failure:
                    self._log(f"the last look before the stop failed: {failure.reason}")
                    watch_failure.record(current.project(), failure.reason)
            if self._attention is not None:
                self._signal_attention(current)  # a turn that ended since the last look is still told
            try:
                self._runtime(current.runtime_kind).stop_sandbox(current.vm_name)
            except NotFound as error:
                self._log(f"{current.vm_name} is gone: {error.message}")
                return ReaperOutcome.VM_GONE
            except SandboxError as error:
                self._log(f"stopping {current.vm_name} failed: {error.message}")
                return ReaperOutcome.FAILED
            self._log(f"stopped {current.vm_name}")
            # Still under the guard: a start waits for it, so this record of where the VM left
            # the files never lands on top of the record a start that came after made.
            self._note_guarded_files(current)
        return ReaperOutcome.STOPPED

    def _fail_closed(self, current: ReaperSettings, reason: str) -> ReaperOutcome:
        """Stop the VM at once, clients attached or not: nothing would watch what it does."""
        self._log(f"stopping {current.vm_name} at once, clients attached or not: {reason}")
        watch_failure.record(current.project(), reason)
        return stop_blind(current, self._runtime(current.runtime_kind), self._log)

    def _note_guarded_files(self, current: ReaperSettings) -> None:
        """Where the VM left the files the host runs: later changes there are the user's."""
        from opencode_sandbox.services.guard.reviews import note_vm_stopped

        try:
            note_vm_stopped(current.state_root, current.slug, self._log)
        except Exception as error:  # whatever the VM left in the checkout, the reaper ends as it should
            self._log(f"reading the guarded files failed: {error!r}")


def stop_blind(current: ReaperSettings, runtime: Runtime, log: Callable[[str], None]) -> ReaperOutcome:
    """Stop the VM because nothing watches it any more; where the VM left the guarded files is
    noted as at any stop."""
    from opencode_sandbox.services.guard.reviews import note_vm_stopped

    with stop_guard(current.state_root, current.slug):
        try:
            runtime.stop_sandbox(current.vm_name)
        except NotFound as error:
            log(f"{current.vm_name} is gone: {error.message}")
            return ReaperOutcome.VM_GONE
        except SandboxError as error:
            log(f"stopping {current.vm_name} failed: {error.message}")
            return ReaperOutcome.FAILED
        log(f"stopped {current.vm_name}")
        try:
            note_vm_stopped(current.state_root, current.slug, log)
        except Exception as error:  # what failed the watch may fail this too; the VM is down
            log(f"reading the guarded files failed: {error!r}")
    return ReaperOutcome.STOPPED_BLIND


def _mode_text(mode: StopMode, max_retries: int) -> str:
    if mode is StopMode.STOP_IMMEDIATELY:
        return "stop-immediately mode: busy sessions do not hold the VM"
    return f"wait mode: busy sessions hold the VM, except those asking a question or retried over {max_retries} times"


# the real collaborators


class SettingsFile:
    """The saved settings, read again whenever the file changes; damaged files are logged and skipped."""

    def __init__(self, state_root: Path, slug: str, log: Callable[[str], None]) -> None:
        self._state_root = state_root
        self._slug = slug
        self._log = log
        self._seen: tuple[int, int] | None = None
        self._current: ReaperSettings | None = None

    def __call__(self) -> ReaperSettings:
        path = settings_path(self._state_root, self._slug)
        try:
            status = path.stat()
            stamp = (status.st_mtime_ns, status.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._seen or self._current is None:
            self._seen = stamp
            try:
                loaded = load_settings(self._state_root, self._slug)
            except UnreadableState as error:
                self._log(f"ignoring damaged settings: {error}")
                loaded = None
            if loaded is not None:
                self._current = loaded
        if self._current is None:
            raise SandboxError(f"no reaper settings in {path}", hint="start the reaper with spawn_reaper")
        return self._current


class RuntimeCache:
    """One runtime of each kind, acting for the host user whose state folder is `state_root`."""

    def __init__(self, state_root: Path) -> None:
        self._state_root = state_root
        self._runtimes: dict[RuntimeKind, Runtime] = {}

    def __call__(self, kind: RuntimeKind) -> Runtime:
        if kind not in self._runtimes:
            from opencode_sandbox.runtime.select import make_runtime
            from opencode_sandbox.state.store import StateStore

            store = StateStore(self._state_root)
            self._runtimes[kind] = make_runtime(kind, lambda slug: store.load(slug).home_volume)
        return self._runtimes[kind]


class DaemonActivityReader:
    """Reads the daemon's activity through one client, made anew when the URL or password changes."""

    def __init__(self, log: Callable[[str], None], timeout_s: float = 5.0) -> None:
        self._log = log
        self._timeout_s = timeout_s
        self._client: DaemonClient | None = None
        self._target: tuple[str, str | None] | None = None

    def __call__(self, settings: ReaperSettings) -> DaemonActivity:
        from opencode_sandbox.daemon.activity import read_activity
        from opencode_sandbox.daemon.client import DaemonClient

        target = (settings.daemon_url, settings.password)
        if self._client is None or target != self._target:
            self.close()
            self._client = DaemonClient(
                settings.daemon_url, settings.password, timeout_s=self._timeout_s, log=self._log
            )
            self._target = target
        return read_activity(self._client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class TerminalAgentReader:
    """Reads a terminal agent's activity in the VM: its session, and the state its hooks recorded or
    its terminal's output tells (the profile's `activity`)."""

    def __init__(self, runtimes: Callable[[RuntimeKind], Runtime], guests: GuestFactory | None = None) -> None:
        self._runtimes = runtimes
        self._guests = guests

    def __call__(self, settings: ReaperSettings) -> DaemonActivity:
        from opencode_sandbox.core.agent_activity import as_activity
        from opencode_sandbox.core.agents import activity_of
        from opencode_sandbox.daemon.errors import DaemonError
        from opencode_sandbox.guest.shell import ShellGuest

        guests = self._guests or ShellGuest
        try:
            report = guests(self._runtimes(settings.runtime_kind), settings.vm_name).agent_report()
        except SandboxError as error:
            raise DaemonError(f"the agent's state cannot be read: {error.message}") from None
        return as_activity(report, activity_of(settings.agent))


class ActivityOfAgent:
    """opencode's activity from its server, a terminal agent's from the VM."""

    def __init__(self, daemon: ActivityReader, terminal: ActivityReader) -> None:
        self._daemon = daemon
        self._terminal = terminal

    def __call__(self, settings: ReaperSettings) -> DaemonActivity:
        return (self._daemon if settings.agent == DEFAULT_AGENT else self._terminal)(settings)


def run_exclusively(
    state_root: Path, slug: str, log: Callable[[str], None], work: Callable[[], ReaperOutcome]
) -> ReaperOutcome | None:
    """Run `work` as the project's one reaper; None (at once) when another reaper runs."""
    with reaper_lock(state_root, slug) as mine:
        if not mine:
            log("another reaper already watches this project; leaving it to that one")
            return None
        return work()


WATCH_DIED = 3
"""The exit status of a watching process that ended without finishing its job."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opencode_sandbox.services.reaper", description=__doc__)
    parser.add_argument("--state-root", type=Path, required=True)
    parser.add_argument("--slug", required=True)
    arguments = parser.parse_args(argv)
    state_root: Path = arguments.state_root
    slug: str = arguments.slug
    log = ReaperLog(StateLayout(state_root).project(slug))
    with reaper_lock(state_root, slug) as mine:
        if not mine:
            log("another reaper already watches this project; leaving it to that one")
            return 0
        return supervised(state_root, slug, log, lambda: _watch(state_root, slug, log))


def supervised(state_root: Path, slug: str, log: Callable[[str], None], watch: Callable[[], int],
               runtimes: Callable[[RuntimeKind], Runtime] | None = None) -> int:
    """Run `watch` in a child process and stop the VM if it ends without finishing its job: killed
    (the kernel's out-of-memory killer, a signal) or failed. This process only waits, so what the
    VM makes the watch read never weighs on it."""
    child = os.fork()
    if child == 0:
        status = WATCH_DIED
        try:
            status = watch()
        finally:
            os._exit(status)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            return WATCH_DIED
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        reason = f"the watching process was killed by signal {os.WTERMSIG(status)}"
    elif os.WEXITSTATUS(status) == WATCH_DIED:
        reason = "the watching process failed (its log says why)"
    else:
        return os.WEXITSTATUS(status)
    log(f"{reason}; stopping the VM, as nothing watches it any more")
    try:
        current = load_settings(state_root, slug)
    except UnreadableState as error:
        log(f"cannot stop the VM: its settings are unreadable: {error}")
        return WATCH_DIED
    if current is None:
        return WATCH_DIED
    watch_failure.record(current.project(), reason)
    try:
        stop_blind(current, (runtimes or RuntimeCache(state_root))(current.runtime_kind), log)
    except Exception:
        log("stopping the VM failed:\n" + traceback.format_exc().rstrip())
    return WATCH_DIED


def _answer_looks(state_root: Path, slug: str, watch: LiveWatch, log: Callable[[str], None]) -> LookServer | None:
    """A start's questions answered by the watch (`reaper_looks`); without them a start walks the
    checkout itself."""
    from opencode_sandbox.services.reaper_looks import LookServer, socket_name

    try:
        return LookServer(socket_name(state_root, slug), watch.look_now).start()
    except OSError as error:
        log(f"cannot answer the starts' questions: {error}; each start walks the checkout itself")
        return None


def _watch(state_root: Path, slug: str, log: Callable[[str], None]) -> int:
    reader = DaemonActivityReader(log)
    try:
        from opencode_sandbox.services.attention import AttentionWatch
        from opencode_sandbox.services.guard.live_watch import LiveWatch

        runtimes = RuntimeCache(state_root)
        activity = ActivityOfAgent(reader, TerminalAgentReader(runtimes))
        watch = LiveWatch(runtimes, log)
        looks = _answer_looks(state_root, slug, watch, log)
        reaper = Reaper(SettingsFile(state_root, slug, log), runtimes, activity, log, watch=watch,
                        attention=AttentionWatch(runtimes, reader, log))
        try:
            outcome = reaper.run()
        finally:
            if looks is not None:
                looks.close()
            watch.close()
    except SandboxError as error:
        log(f"giving up: {error.message}")
        return WATCH_DIED
    except Exception:
        log("unexpected failure:\n" + traceback.format_exc().rstrip())
        return WATCH_DIED
    finally:
        reader.close()
    log(f"done ({outcome.value})")
    return 1 if outcome is ReaperOutcome.FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
