"""What the idle reaper does while the VM runs, clients attached or not: the guard's looks at what
the VM changed of what the host runs, as the kernel's file events call for them (`guard_looks`),
and the VM's commits to the host and the host's to the VM every few seconds, each on a schedule of
its own: a sync the VM makes slow (it picks what its commits hold) never makes the guard look
later. A start's question (`reaper_looks`) is answered here too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.services.guard.looks import GuardLooks, record_stamp
from opencode_sandbox.services.guard.watch_failure import WatchFailed

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

SYNC_INTERVAL_S = 3.0
SYNC_COST_FACTOR = 2.0
"""A slow VM (an emulated one) is asked at most a third of the time."""
AFTER_A_DETACH_S = 1.0
"""A start or a detach makes the next sync due this soon, not at once: commands run one after another
(a script of `shell -- CMD`) meet a reaper that waits for them to pause."""
WORK_TREE_INTERVAL_S = 30.0
WORK_TREE_COST_FACTOR = 20.0
"""The isolated mode's commit of the VM's whole work tree, at its first sync after a start or a
detach and then twice a minute at most: git in the VM looks at every file for it, so its cost
grows with the work tree, and a VM spends at most a twentieth of its time on it."""


class LiveWatch:
    def __init__(self, runtime: Callable[[RuntimeKind], Runtime], log: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._runtime = runtime
        self._log = log
        self._clock = clock
        self._next_sync = 0.0
        self._next_work_tree = 0.0
        self._generation = ""
        self._looks = GuardLooks(log, clock)
        self._lock = threading.Lock()
        """The reaper's loop and a start's question (`look_now`) take turns."""
        self._settings: ReaperSettings | None = None
        self._failure: WatchFailed | None = None

    def due(self) -> bool:
        with self._lock:
            looks_due = self._looks.due() and not (self._settings is not None and self._settings.isolated)
            return self._failure is not None or looks_due or self._clock() >= self._next_sync

    def __call__(self, settings: ReaperSettings) -> None:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._settings = settings
            if self._looks.due() and not settings.isolated:  # an isolated VM has nothing of the checkout
                self._looks.look(settings)
        if settings.generation != self._generation:  # a start or a detach since: both directions are due soon
            soon = self._clock() + AFTER_A_DETACH_S
            self._generation, self._next_sync, self._next_work_tree = settings.generation, soon, soon
        if not settings.project_root:
            self._next_sync = float("inf")  # nothing to sync with
        elif self._clock() >= self._next_sync:
            self._sync(settings)

    def close(self) -> None:
        self._looks.close()

    def look_now(self) -> str:
        """A start's question: `clean STAMP` once everything the events reported is looked at, against
        the guard record of that stamp; `blind REASON` when the events cannot vouch for the checkout."""
        with self._lock:
            settings, events = self._settings, self._looks.events
            if self._failure is not None:
                return f"blind {self._failure.reason}"
            if settings is None or events is None:
                return "blind the watch has not looked yet"
            if not events.complete:
                return f"blind {events.why_incomplete}"
            if self._looks.pending() or self._looks.looked_at != record_stamp(settings):
                try:
                    self._looks.look(settings, waiting=False)
                except WatchFailed as failure:
                    self._failure = failure  # the reaper's loop stops the VM
                    return f"blind {failure.reason}"
            if not events.complete:
                return f"blind {events.why_incomplete}"
            return f"clean {self._looks.looked_at}" if self._looks.looked_at else "blind the last look left work"

    def _sync(self, settings: ReaperSettings) -> None:
        from opencode_sandbox.project import git_paths
        from opencode_sandbox.services.vm_git import sync_project

        began = self._clock()
        root = Path(settings.project_root)
        work_tree = settings.isolated and began >= self._next_work_tree
        sync_project(self._runtime(settings.runtime_kind), settings.vm_name, root, settings.project().folder,
                     self._log, git_paths(root), settings.git_branches, work_tree=work_tree)
        ended = self._clock()
        self._next_sync = ended + max(SYNC_INTERVAL_S, SYNC_COST_FACTOR * (ended - began))
        if work_tree:
            self._next_work_tree = ended + max(WORK_TREE_INTERVAL_S, WORK_TREE_COST_FACTOR * (ended - began))
