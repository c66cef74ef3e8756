"""What the idle reaper does every few seconds while the VM runs, clients attached or not: the
VM's commits to the host and the host's to the VM, and what the VM changed of what the host runs
(a git directory below the checkout, a guarded file) moved out of the host's way."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.services.watch_failure import WatchFailed

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

WATCH_INTERVAL_S = 3.0
WALK_COST_FACTOR = 20.0
"""A checkout that takes long to walk is walked less often: at most 1/20 of the time."""
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

    def due(self) -> bool:
        return self._clock() >= min(self._next_round, self._next_sync)

    def __call__(self, settings: ReaperSettings) -> None:
        if self._clock() >= self._next_round:
            self._round(settings)
        if settings.project_root and self._clock() >= self._next_sync:
            self._sync(settings)

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
        if ended - began > ROUND_LIMIT_S:
            raise WatchFailed(f"a look at what the VM changed took {ended - began:.0f} s, more than "
                              f"{ROUND_LIMIT_S:.0f} s: the guard cannot keep up")
        self._next_round = ended + max(WATCH_INTERVAL_S, WALK_COST_FACTOR * (ended - began))

    def _sync(self, settings: ReaperSettings) -> None:
        from opencode_sandbox.project import git_paths
        from opencode_sandbox.services.vm_git import sync_project

        began = self._clock()
        root = Path(settings.project_root)
        sync_project(self._runtime(settings.runtime_kind), settings.vm_name, root, settings.project().folder,
                     self._log, git_paths(root), settings.git_branches)
        ended = self._clock()
        self._next_sync = ended + max(WATCH_INTERVAL_S, SYNC_COST_FACTOR * (ended - began))
