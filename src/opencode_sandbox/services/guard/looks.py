"""The guard's looks while the VM runs, as the kernel's file events call for them
(`checkout_events`): at once at the files they named, where that suffices (`guard_moves.catch_named`);
at everything (`guard_moves.catch_while_running`, a walk) where it does not, at most a quarter of
the time; and as a backstop now and then, since a write through a mapped file raises no event
until the file is closed. Where the events cannot cover the checkout (past the kernel's limit of
watched folders, a folder that cannot be watched), everything is looked at on a schedule, as
before the events, and the log says why.

It fails closed (`WatchFailed`, and the VM stops): a look over the guard's bounds, slower than
`LOOK_LIMIT_S`, failing twice in a row, or a file the VM writes again every time it is put back."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.services.guard.events import CheckoutEvents
from opencode_sandbox.services.guard.watch_failure import WatchFailed

if TYPE_CHECKING:
    from opencode_sandbox.services.guard.moves import Notes
    from opencode_sandbox.services.reaper_settings import ReaperSettings

SCHEDULE_S = 3.0
WALK_COST_FACTOR = 20.0
"""Without complete events, a checkout that takes long to walk is walked less often: at most 1/20
of the time."""
BACKSTOP_S = 60.0
BACKSTOP_COST_FACTOR = 200.0
"""With complete events, the backstop look takes at most 1/200 of the time (0.5 % of a core)."""
WALK_AFTER_EVENTS_FACTOR = 4.0
"""A look at everything that events call for comes at most at 1/4 of the time while the VM keeps
making folders: one of 10 ms waits 40 ms for the next, one of a second (200,000 files) four
seconds. A look at the files the events named never waits."""
LOOK_LIMIT_S = 120.0
"""A look that takes longer than this cannot keep up with the VM: the VM stops."""
SLOW_LOOK_S = 5.0
"""A look that takes longer than this is said in the log."""
REWRITES_LIMIT = 5
REWRITES_WINDOW_S = 60.0
"""A file the VM writes again this many times within this window after it was put back would be
the VM's most of the time: the VM stops."""
REWRITES_KEPT = 1000


class GuardLooks:
    def __init__(self, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._clock = clock
        self.events: CheckoutEvents | None = None
        self._named: set[str] = set()
        """The files the events named since the last look."""
        self._whole = False
        """The events called for a look at everything."""
        self._lost = False
        """Events were lost (the queue overflowed): folders made meanwhile are not watched yet."""
        self._next_backstop = 0.0
        self._next_whole = 0.0
        self._failed: str | None = None
        self._left = 0
        self.looked_at = ""
        """The guard record the last look compared with (`reaper_looks.record_stamp`), once it found
        the checkout as the record says or put it back so; empty while anything is pending."""
        self._put_back: dict[str, list[float]] = {}
        self._walked_with = ""
        self._said_incomplete = ""
        """The guard record the last look at everything compared with: a new one is looked at whole."""

    def close(self) -> None:
        if self.events is not None:
            self.events.close()

    def due(self) -> bool:
        self._collect()
        now = self._clock()
        return now >= self._next_backstop or bool(self._named) or (self._whole and now >= self._next_whole)

    def pending(self) -> bool:
        """Something the events reported is not looked at yet."""
        self._collect()
        return bool(self._named or self._whole)

    def look(self, settings: ReaperSettings, waiting: bool = True) -> None:
        """Look at what is pending, or at everything when the backstop is due. With `waiting`, a
        look at everything the events call for waits its turn (`WALK_AFTER_EVENTS_FACTOR`); the
        files they named are looked at at once."""
        if self.events is None:
            self.events = self._watch_events(settings)
        self._collect()
        now = self._clock()
        before = record_stamp(settings)
        self.looked_at = ""
        named, self._named = self._named, set()
        whole = self._whole or now >= self._next_backstop or before != self._walked_with
        if named:
            whole = self._look_at_named(settings, named) or whole
        if (whole and waiting and self._whole and now < self._next_whole and now < self._next_backstop
                and before == self._walked_with):
            return  # the walk waits its turn; nothing is vouched for meanwhile
        if whole:
            self._whole = False
            if self.events is not None and (self._lost or not self.events.complete):
                self._lost = False
                self.events.rewatch()  # folders made while events were lost, or past a limit now lifted
            self._say_coverage()
            self._look_at_everything(settings)
        if self._failed is None and not self._left and record_stamp(settings) == before:
            self.looked_at = before

    def _collect(self) -> None:
        taken = self.events.take() if self.events is not None else None
        if taken is None:
            return
        self._whole = self._whole or taken.whole
        self._lost = self._lost or taken.everything
        if not taken.everything:
            self._named |= taken.paths

    def _look_at_named(self, settings: ReaperSettings, named: set[str]) -> bool:
        """Whether a look at everything is needed besides."""
        from opencode_sandbox.services.guard.files import OverBudget
        from opencode_sandbox.services.guard.moves import catch_named

        try:
            notes, whole = catch_named(settings.state_root, settings.slug, named, self._log)
        except OverBudget as error:
            raise WatchFailed(f"the checkout holds more than the guard reads: {error}") from None
        except Exception as error:  # the look at everything that follows judges what is there
            self._log(f"looking at the files the events named failed: {error!r}; looking at everything")
            return True
        self._left = notes.left_for_review
        self._count_rewrites(notes)
        return whole

    def _look_at_everything(self, settings: ReaperSettings) -> None:
        from opencode_sandbox.services.guard.files import OverBudget
        from opencode_sandbox.services.guard.moves import Notes, catch_while_running

        began = self._clock()
        self._left = 0
        try:
            notes = catch_while_running(settings.state_root, settings.slug, self._log)
        except OverBudget as error:
            raise WatchFailed(f"the checkout holds more than the guard reads: {error}") from None
        except Exception as error:
            if self._failed is not None:
                raise WatchFailed(f"looking at what the VM changed failed twice: {self._failed}; {error!r}") from None
            self._failed = repr(error)
            self._whole = True
            self._log(f"looking for the VM's changes to what the host runs failed: {error!r}; looking again at once")
            return
        self._failed = None
        self._walked_with = record_stamp(settings)
        if isinstance(notes, Notes):
            self._left = notes.left_for_review
            self._count_rewrites(notes)
        ended = self._clock()
        took = ended - began
        if took > LOOK_LIMIT_S:
            raise WatchFailed(f"a look at what the VM changed took {took:.0f} s, more than "
                              f"{LOOK_LIMIT_S:.0f} s: the guard cannot keep up")
        if took > SLOW_LOOK_S:
            self._log(f"a look at the whole checkout took {took:.1f} s")
        self._next_whole = ended + WALK_AFTER_EVENTS_FACTOR * took
        if self.events is not None and self.events.complete:
            self._next_backstop = ended + max(BACKSTOP_S, BACKSTOP_COST_FACTOR * took)
        else:
            self._next_backstop = ended + max(SCHEDULE_S, WALK_COST_FACTOR * took)

    def _say_coverage(self) -> None:
        """The log says when the events stop or start vouching for the checkout."""
        why = self.events.why_incomplete if self.events is not None else ""
        if why != self._said_incomplete:
            self._log(f"the file events cannot cover the checkout: {why}; looking at it on a schedule instead"
                      if why else "the file events cover the checkout again")
            self._said_incomplete = why

    def _count_rewrites(self, notes: Notes) -> None:
        """`WatchFailed` when the VM keeps writing a file back as soon as it is put back, or making a
        git directory or a link again as soon as it is moved aside."""
        now = self._clock()
        paths = [held.change.split(": ", 1)[0] for held in notes.held]
        paths += [moved.split(" -> ", 1)[0] for moved in notes.moved]
        for path in paths:
            times = [moment for moment in self._put_back.get(path, ()) if now - moment < REWRITES_WINDOW_S]
            times.append(now)
            self._put_back[path] = times
            if len(times) >= REWRITES_LIMIT:
                raise WatchFailed(f"the VM wrote {path} again {len(times)} times within {REWRITES_WINDOW_S:.0f} s "
                                  "as soon as it was put back or moved aside: it would be the VM's most of the time "
                                  "(an agent that keeps editing a file the guard protects does this too: its edits "
                                  "never stay, so make such a change on the host yourself)")
        if len(self._put_back) > REWRITES_KEPT:
            self._put_back = {path: times for path, times in self._put_back.items()
                              if times and now - times[-1] < REWRITES_WINDOW_S}

    def _watch_events(self, settings: ReaperSettings) -> CheckoutEvents | None:
        """The events of the checkout and the folders mounted writable, from before the first look
        on, so nothing the VM changes during it goes unseen."""
        from opencode_sandbox.services.guard.store import GuardStore

        record = GuardStore(settings.project().folder).load()
        if record is None:
            return None
        root = Path(record.root)
        began = self._clock()
        events = CheckoutEvents([root, *(Path(each) for each in record.mounts)],
                                skip=[root / ".git"] if record.host_git else [])
        took = self._clock() - began
        self._log(f"watching {events.watched} folders for changes ({took * 1000:.0f} ms to set up)")
        return events


def record_stamp(settings: ReaperSettings) -> str:
    from opencode_sandbox.services.guard.store import GuardStore
    from opencode_sandbox.services.reaper_looks import record_stamp as stamp_of

    return stamp_of(GuardStore(settings.project().folder).record_path)
