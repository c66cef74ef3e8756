"""What the idle reaper does while the VM runs, clients attached or not: the VM's commits to the
host and the host's to the VM every few seconds, and what the VM changed of what the host runs (a
git directory below the checkout, a guarded file, a privileged entry) moved out of the host's way
as soon as the kernel's file events say something changed (`checkout_events`).

Without events, nothing is walked but a backstop look now and then (`BACKSTOP_S`, longer on a
checkout that takes long to walk): a change written through a mapped file raises no event until
the file is closed. Where the events cannot cover the checkout (past the kernel's limit of watched
folders), the guard looks on a schedule as it did before, and its log says why."""

from __future__ import annotations

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

    def due(self) -> bool:
        now = self._clock()
        if self._events is not None and self._events.take() is not None:
            self._changed = True
        return now >= min(self._next_round, self._next_sync) or (self._changed and now >= self._next_look)

    def __call__(self, settings: ReaperSettings) -> None:
        if self._events is None:
            self._events = self._watch_events(settings)
        now = self._clock()
        if now >= self._next_round or (self._changed and now >= self._next_look):
            self._changed = False
            self._round(settings)
        if not settings.project_root:
            self._next_sync = float("inf")  # nothing to sync with
        elif self._clock() >= self._next_sync:
            self._sync(settings)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()

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
        from opencode_sandbox.services.guard_moves import catch_while_running

        began = self._clock()
        try:
            catch_while_running(settings.state_root, settings.slug, self._log)
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
