"""Waiting for `opencode serve` to answer, and giving up early once its process is gone."""

from __future__ import annotations

import time

import pytest

from opencode_sandbox.services import daemon_control


@pytest.fixture(autouse=True)
def quick_process_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon_control, "PROCESS_CHECK_S", 0.2)


def test_a_gone_process_ends_the_wait_early() -> None:
    asked: list[float] = []

    def gone() -> bool:
        asked.append(time.monotonic())
        return False

    began = time.monotonic()
    assert daemon_control.wait_until_healthy(lambda: False, timeout_s=30, still_running=gone) is False
    assert time.monotonic() - began < 5
    assert len(asked) == 1


def test_a_running_process_is_waited_for_until_it_answers() -> None:
    answers = iter([False] * 8 + [True])
    checks: list[bool] = []

    def running() -> bool:
        checks.append(True)
        return True

    assert daemon_control.wait_until_healthy(lambda: next(answers), timeout_s=30, still_running=running) is True
    assert checks  # asked at least once while it did not answer


def test_without_a_process_check_the_whole_timeout_is_waited() -> None:
    began = time.monotonic()
    assert daemon_control.wait_until_healthy(lambda: False, timeout_s=1.0) is False
    assert time.monotonic() - began >= 1.0
