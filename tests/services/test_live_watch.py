"""The reaper's watch: the guard's round and the git sync keep schedules of their own."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import opencode_sandbox.services.guard.moves as guard_moves
import opencode_sandbox.services.vm_git as vm_git
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.services.guard.live_watch import LiveWatch
from opencode_sandbox.services.guard.looks import SCHEDULE_S
from opencode_sandbox.services.reaper_settings import ReaperSettings
from tests.fakes.runtime import FakeRuntime

SYNC_S = 600.0
"""A sync the VM made slow: it picks what its commits hold."""


def test_a_slow_sync_never_makes_the_guard_look_later(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    now = [0.0]
    rounds: list[float] = []
    syncs: list[float] = []

    def round_(*_: object) -> None:
        rounds.append(now[0])
        now[0] += 0.1

    def sync(*_: object, **__: object) -> vm_git.SyncReport:
        syncs.append(now[0])
        now[0] += SYNC_S
        return vm_git.SyncReport()

    monkeypatch.setattr(guard_moves, "catch_while_running", round_)
    monkeypatch.setattr(vm_git, "sync_project", sync)
    settings = ReaperSettings("slug", "vm", RuntimeKind.DOCKER, "http://127.0.0.1:1", 10.0,
                              StopMode.WAIT_FOR_QUIESCENCE, 10, tmp_path, project_root=str(tmp_path))
    watch = LiveWatch(lambda kind: FakeRuntime(kind), lambda line: None, clock=lambda: now[0])
    for _ in range(20):
        if watch.due():
            watch(settings)
        now[0] += 1.0
    assert len(syncs) == 1, "the slow sync waits its own turn"
    # The round in the sync's own call waits for it (one thread); every round after comes on time.
    gaps = [later - earlier for earlier, later in itertools.pairwise(rounds)]
    assert len(rounds) >= 5 and max(gaps[1:]) <= SCHEDULE_S + 1.5, rounds
