"""What the idle reaper does while the VM runs, clients attached or not: the VM's commits to the
host and the host's to the VM every few seconds, and what the VM changed of what the host runs (a
git directory below the checkout, a guarded file, a privileged entry) moved out of the host's way
as soon as the kernel's file events say something changed (`checkout_events`).

Without events, nothing is walked but a backstop look now and then (`BACKSTOP_S`, longer on a
checkout that takes long to walk): a change written through a mapped file raises no event until
the file is closed. Where the events cannot cover the checkout (past the kernel's limit of watched
folders), the guard looks on a schedule as it did before, and its log says why."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.services.checkout_events import CheckoutEvents
from opencode_sandbox.services.watch_failure import WatchFailed

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

WATCH_INTERVAL_S = 3.0
WALK_COST_FACTOR = 20.0
"""Without complete events, a checkout that takes long to walk is walked less often: at most 1/20
of the time."""
BACKSTOP_S = 60.0
BACKSTOP_COST_FACTOR = 200.0
"""With complete events, the backstop look takes at most 1/200 of the time (0.5 % of a core)."""
EVENT_COST_FACTOR = 4.0
"""Looks that events call for come at most at 1/4 of the time while the VM keeps writing: a look of
10 ms waits 40 ms for the next, one of a second (a checkout of 200,000 files) four seconds."""
SYNC_COST_FACTOR = 2.0
"""A slow VM (an emulated one) is asked at most a third of the time."""
ROUND_LIMIT_S = 120.0
"""A look at the checkout that takes longer than this cannot keep up with the VM: the VM stops."""


class LiveWatch:
    """The guard's round and the git sync, each on a schedule of its own: a sync the VM makes slow
    (it picks what its commits hold) never makes the guard look later."""

    def __init__(self, runtime: Callable[[RuntimeKind], Runtime], log: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._runtime = runtime
        self._log = log
        self._clock = clock
        self._next_round = 0.0
        self._next_sync = 0.0
        self._failed: str | None = None
        self._events: CheckoutEvents | None = None
        self._changed = False
        self._next_look = 0.0
        """When events may next call for a look (`EVENT_COST_FACTOR`)."""
        self._lock = threading.Lock()
        """The reaper's loop and a start's question (`look_now`) take turns."""
        self._settings: ReaperSettings | None = None
        self._looked_at = ""
        """The guard record the last look compared with (`reaper_looks.record_stamp`), once it found
        the checkout as the record says or put it back so."""
        self._failure: WatchFailed | None = None
        self._left = 0
        self._named: set[str] = set()
        """The files the events named since the last look, when a look at them alone may do."""
        self._whole = False
        """The events called for a look at everything."""

    def due(self) -> bool:
        with self._lock:
            now = self._clock()
            self._collect()
            return (now >= min(self._next_round, self._next_sync) or (self._changed and now >= self._next_look)
                    or self._failure is not None)

    def __call__(self, settings: ReaperSettings) -> None:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._settings = settings
            if self._events is None:
                self._events = self._watch_events(settings)
            now = self._clock()
            if self._changed and not self._whole and now < self._next_round:
                self._changed = False
                self._look(settings, named=True)
            elif now >= self._next_round or (self._changed and now >= self._next_look):
                self._changed = False
                self._look(settings)
        if not settings.project_root:
            self._next_sync = float("inf")  # nothing to sync with
        elif self._clock() >= self._next_sync:
            self._sync(settings)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()

    def look_now(self) -> str:
        """A start's question (`reaper_looks`): `clean STAMP` once everything the events reported is
        looked at, `blind REASON` when the events cannot vouch for the checkout."""
        with self._lock:
            settings, events = self._settings, self._events
            if self._failure is not None:
                return f"blind {self._failure.reason}"
            if settings is None or events is None:
                return "blind the watch has not looked yet"
            if not events.complete:
                return f"blind {events.why_incomplete}"
            self._collect()
            if self._changed or self._looked_at != self._record_stamp(settings):
                named = self._changed and not self._whole and self._looked_at == self._record_stamp(settings)
                self._changed = False
                try:
                    self._look(settings, named=named)
                except WatchFailed as failure:
                    self._failure = failure  # the reaper's loop stops the VM
                    return f"blind {failure.reason}"
            return f"clean {self._looked_at}" if self._looked_at else "blind the last look failed"

    def _collect(self) -> None:
        taken = self._events.take() if self._events is not None else None
        if taken is None:
            return
        self._changed = True
        self._whole = self._whole or taken.whole
        if not self._whole:
            self._named |= taken.paths
        else:
            self._named.clear()

    @staticmethod
    def _record_stamp(settings: ReaperSettings) -> str:
        from opencode_sandbox.services.guard_store import GuardStore
        from opencode_sandbox.services.reaper_looks import record_stamp

        return record_stamp(GuardStore(settings.project().folder).record_path)

    def _look(self, settings: ReaperSettings, named: bool = False) -> None:
        """A look at the files the events named when `named` and they allow it, else at everything."""
        named_files, self._named, self._whole = self._named, set(), False
        before = self._record_stamp(settings)
        self._looked_at = ""
        if not (named and self._named_look(settings, named_files)):
            self._round(settings)
        if self._failed is None and not self._left and self._record_stamp(settings) == before:
            self._looked_at = before

    def _named_look(self, settings: ReaperSettings, named: set[str]) -> bool:
        """False when the named files call for a look at everything."""
        from opencode_sandbox.services.guard_files import OverBudget
        from opencode_sandbox.services.guard_moves import catch_named

        try:
            notes = catch_named(settings.state_root, settings.slug, named, self._log)
        except OverBudget as error:
            raise WatchFailed(f"the guarded files hold more than the guard reads: {error}") from None
        except Exception as error:  # the look at everything that follows judges what is there
            self._log(f"looking at the files the events named failed: {error!r}; looking at everything")
            return False
        if notes is None:
            return False
        self._left = notes.left_for_review
        return True

    def _watch_events(self, settings: ReaperSettings) -> CheckoutEvents | None:
        """The events of the checkout and the folders mounted writable, from before the first look
        on, so nothing the VM changes during it goes unseen."""
        from opencode_sandbox.services.guard_store import GuardStore

        record = GuardStore(settings.project().folder).load()
        if record is None:
            return None
        root = Path(record.root)
        began = self._clock()
        events = CheckoutEvents([root, *(Path(each) for each in record.mounts)],
                                skip=[root / ".git"] if record.host_git else [])
        took = self._clock() - began
        if events.complete:
            self._log(f"watching {events.watched} folders for changes ({took * 1000:.0f} ms to set up)")
        else:
            self._log(f"the file events cannot cover the checkout: {events.why_incomplete}; "
                      "looking at it on a schedule instead")
        return events

    def _round(self, settings: ReaperSettings) -> None:
        """One look; `WatchFailed` when the guard cannot do its job: over its budget, slower than
        `ROUND_LIMIT_S`, or failed twice in a row (a file the VM swapped mid-look fails one)."""
        from opencode_sandbox.services.guard_files import OverBudget
        from opencode_sandbox.services.guard_moves import Notes, catch_while_running

        began = self._clock()
        self._left = 0
        try:
            notes = catch_while_running(settings.state_root, settings.slug, self._log)
            self._left = notes.left_for_review if isinstance(notes, Notes) else 0
        except OverBudget as error:
            raise WatchFailed(f"the guarded files hold more than the guard reads: {error}") from None
        except Exception as error:
            if self._failed is not None:
                raise WatchFailed(f"looking at what the VM changed failed twice: {self._failed}; {error!r}") from None
            self._failed = repr(error)
            self._log(f"looking for the VM's changes to what the host runs failed: {error!r}; looking again at once")
            return
        self._failed = None
        ended = self._clock()
        took = ended - began
        if took > ROUND_LIMIT_S:
            raise WatchFailed(f"a look at what the VM changed took {took:.0f} s, more than "
                              f"{ROUND_LIMIT_S:.0f} s: the guard cannot keep up")
        self._next_look = ended + EVENT_COST_FACTOR * took
        if self._events is not None and self._events.complete:
            self._next_round = ended + max(BACKSTOP_S, BACKSTOP_COST_FACTOR * took)
        else:
            self._next_round = ended + max(WATCH_INTERVAL_S, WALK_COST_FACTOR * took)

    def _sync(self, settings: ReaperSettings) -> None:
        from opencode_sandbox.project import git_paths
        from opencode_sandbox.services.vm_git import sync_project

        began = self._clock()
        root = Path(settings.project_root)
        sync_project(self._runtime(settings.runtime_kind), settings.vm_name, root, settings.project().folder,
                     self._log, git_paths(root), settings.git_branches)
        ended = self._clock()
        self._next_sync = ended + max(WATCH_INTERVAL_S, SYNC_COST_FACTOR * (ended - began))
