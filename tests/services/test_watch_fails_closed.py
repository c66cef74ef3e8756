"""The watch over a running VM fails closed: when the idle reaper cannot look at what the VM
changes, the VM stops at once, clients attached or not, and the next start says why.

The threat: the VM fills a guarded folder until the look at it fails, slows to a crawl, or the
kernel kills the reaper for its memory; from then on nothing put back what the VM changed and the
VM ran on."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import opencode_sandbox.services.guard.moves as guard_moves
from opencode_sandbox.app import App
from opencode_sandbox.runtime.types import SandboxStatus
from opencode_sandbox.services.guard import watch_failure
from opencode_sandbox.services.guard.files import OverBudget
from opencode_sandbox.services.guard.live_watch import LiveWatch
from opencode_sandbox.services.guard.looks import LOOK_LIMIT_S
from opencode_sandbox.services.guard.reviews import review
from opencode_sandbox.services.guard.watch_failure import WatchFailed
from opencode_sandbox.services.reaper import (
    WATCH_DIED,
    ReaperOutcome,
    supervised,
)
from opencode_sandbox.services.reaper_settings import save_settings
from opencode_sandbox.state_layout import ProjectLayout
from tests.services.app_fakes import messages
from tests.services.test_guard_moves import checkout  # noqa: F401  (a fixture)
from tests.services.test_reaper import SLUG, Setup, run_with_watch, setup  # noqa: F401  (a fixture)


class FailingWatch:
    def __init__(self, reason: str) -> None:
        self.reason = reason

    def due(self) -> bool:
        return True

    def __call__(self, settings: object) -> None:
        raise WatchFailed(self.reason)


def test_a_watch_that_cannot_do_its_job_stops_the_vm_at_once_with_a_client_attached(setup: Setup) -> None:  # noqa: F811
    setup.attach()
    try:
        outcome = run_with_watch(setup, FailingWatch("the guarded files hold more than the guard reads"))
    finally:
        setup.detach()
    assert outcome is ReaperOutcome.STOPPED_BLIND
    assert setup.status() is SandboxStatus.STOPPED
    assert any("stopping" in line and "at once, clients attached or not" in line for line in setup.log_lines())
    told = watch_failure.take(setup.project)
    assert told is not None and "hold more than the guard reads" in told
    assert watch_failure.take(setup.project) is None, "told once"


def test_a_round_over_the_budget_fails_the_watch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def over(*_: object) -> None:
        raise OverBudget("more than 50000 guarded entries (the last: deep/.claude/x)")

    monkeypatch.setattr(guard_moves, "catch_while_running", over)
    with pytest.raises(WatchFailed, match="more than 50000 guarded entries"):
        LiveWatch(lambda kind: None, lambda line: None)(_settings(tmp_path))  # type: ignore[arg-type,return-value]


def test_one_failed_round_is_tried_again_at_once_and_a_second_fails_the_watch(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    failures = [OSError(5, "Input/output error"), OSError(5, "Input/output error")]

    def flaky(*_: object) -> None:
        raise failures.pop(0)

    monkeypatch.setattr(guard_moves, "catch_while_running", flaky)
    log: list[str] = []
    watch = LiveWatch(lambda kind: None, log.append)  # type: ignore[arg-type,return-value]
    watch(_settings(tmp_path))
    assert watch.due() and "looking again at once" in log[-1]
    with pytest.raises(WatchFailed, match="failed twice"):
        watch(_settings(tmp_path))


def test_a_round_slower_than_the_limit_fails_the_watch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    now = [0.0]

    def slow(*_: object) -> None:
        now[0] += LOOK_LIMIT_S + 1

    monkeypatch.setattr(guard_moves, "catch_while_running", slow)
    with pytest.raises(WatchFailed, match="the guard cannot keep up"):
        LiveWatch(lambda kind: None, lambda line: None, clock=lambda: now[0])(_settings(tmp_path))  # type: ignore[arg-type,return-value]


def _settings(tmp_path: Path) -> object:
    from opencode_sandbox.core.stop_mode import StopMode
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

    return ReaperSettings("slug", "vm", RuntimeKind.DOCKER, "http://127.0.0.1:1", 10.0,
                          StopMode.WAIT_FOR_QUIESCENCE, 10, tmp_path)


@pytest.mark.parametrize("death", ["killed", "failed"])
def test_a_watching_process_that_dies_leaves_a_stopped_vm(setup: Setup, death: str) -> None:  # noqa: F811
    save_settings(setup.settings)

    def watch() -> int:
        if death == "killed":  # as the kernel's out-of-memory killer ends it
            os.kill(os.getpid(), signal.SIGKILL)
        return WATCH_DIED

    log: list[str] = []
    assert supervised(setup.root, SLUG, log.append, watch, lambda _kind: setup.runtime) == WATCH_DIED
    assert setup.status() is SandboxStatus.STOPPED
    told = watch_failure.take(ProjectLayout(setup.project.folder))
    assert told is not None and ("killed by signal 9" if death == "killed" else "failed") in told


def test_a_watching_process_that_ends_its_job_leaves_the_vm_alone(setup: Setup) -> None:  # noqa: F811
    save_settings(setup.settings)
    assert supervised(setup.root, SLUG, lambda line: None, lambda: 0, lambda _kind: setup.runtime) == 0
    assert setup.status() is SandboxStatus.RUNNING
    assert watch_failure.take(setup.project) is None


def test_the_next_start_says_why_the_vm_was_stopped(app: App) -> None:
    watch_failure.record(ProjectLayout(app.state.project_dir(app.project.slug)),
                         "the watching process was killed by signal 9 \x1b]52;c;aWQ=\x07")
    review(app, vm_may_write_after=True)
    said = messages(app)
    assert "the VM was stopped at" in said and "killed by signal 9" in said
    assert "\x1b" not in said, "the reason is escaped"
    review(app, vm_may_write_after=True)
    assert messages(app).count("the VM was stopped") == 1, "told once"
