"""Processes that may live for hours collect cyclic garbage, though the launcher starts them without.

The launcher switches the cyclic collector off for its short commands. The idle reaper's loop,
an attached client and `run --serve-only`'s wait switch it back on where they begin.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.services.reaper import ReaperOutcome
from opencode_sandbox.services.start import client as clients
from opencode_sandbox.services.start.pipeline import ReadyVm, Start
from tests.fakes.runtime import FakeRuntime
from tests.fixtures.fake_daemon import fake_daemon
from tests.services.app_fakes import make_app, results_into
from tests.services.test_reaper import BUSY, TIMEOUT_S, VM, Setup

MIB = 1024 * 1024


def test_the_reaper_loop_keeps_its_memory_flat_while_it_polls_a_busy_daemon(tmp_path: Path) -> None:
    """The real loop and the real daemon reader, polling a fake daemon over loopback HTTP for
    the simulated time of about 500 polls (the runtime and the clock are fakes).

    Every poll leaves a few hundred objects in reference cycles (the HTTP exchanges); only the
    cyclic collector frees them. The loop starts as a launcher would leave it: collector off.
    """
    collected: list[int] = []

    def count_collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            collected.append(info["collected"])

    with fake_daemon("secret") as daemon:
        daemon.set_activity(BUSY)
        setup = Setup(tmp_path / "state", daemon)
        memory: list[int] = []
        setup.clock.at(TIMEOUT_S + 200, lambda: memory.append(tracemalloc.get_traced_memory()[0]))
        setup.clock.at(TIMEOUT_S + 1000, lambda: memory.append(tracemalloc.get_traced_memory()[0]))
        setup.clock.at(TIMEOUT_S + 1001, lambda: setup.runtime.stop_sandbox(VM))
        gc.collect()
        gc.disable()
        gc.callbacks.append(count_collected)
        tracemalloc.start()
        try:
            assert setup.run() is ReaperOutcome.VM_GONE
        finally:
            tracemalloc.stop()
            gc.callbacks.remove(count_collected)
        polls = daemon.requested("GET /session/status")
    assert polls > 450
    early, late = memory
    # About 0.2 MiB of the growth is the fake daemon's own record of the requests it served.
    assert late - early < 1 * MIB, f"grew by {(late - early) / MIB:.1f} MiB over {polls} polls"
    assert sum(collected) > 100 * polls, "the loop made the cyclic garbage this test is about"


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """An application whose VM is ready at once (the lifecycle itself is tested elsewhere)."""
    monkeypatch.setattr(Start, "prepare",
                        lambda self, *args: ReadyVm(VM, "http://127.0.0.1:9", "password"))
    monkeypatch.setattr(clients, "_hand_to_reaper", lambda app, ready, leaving=False: None)
    return make_app(FakeRuntime(RuntimeKind.DOCKER), tmp_path)


def test_serve_only_waits_with_the_collector_on(prepared: Any) -> None:
    during_wait: list[bool] = []
    shown: list[str] = []
    gc.disable()
    assert clients.run_attached(results_into(prepared, shown), False, None, True, (),
                                lambda: during_wait.append(gc.isenabled())) == 0
    assert during_wait == [True]
    assert "URL:      http://127.0.0.1:9" in shown


ATTACHES = {
    "interactive shell": lambda prepared: clients.run_shell(prepared, False, False, ()),
    "shell command": lambda prepared: clients.run_shell(prepared, False, False, ("make", "test")),
    "opencode": lambda prepared: clients.run_attached(prepared, False, None, False, (), lambda: None),
}


@pytest.mark.parametrize("attach_with", ATTACHES.values(), ids=ATTACHES.keys())
def test_an_attached_client_runs_with_the_collector_on(
    prepared: Any, monkeypatch: pytest.MonkeyPatch, attach_with: Any
) -> None:
    during_attach: list[bool] = []

    def attach(name: str, argv: Sequence[str], **options: Any) -> int:
        during_attach.append(gc.isenabled())
        return 0

    monkeypatch.setattr(prepared.runtime, "attach", attach)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    gc.disable()
    assert attach_with(prepared) == 0
    assert during_attach == [True]
