"""`opencode serve` started beside a `shell` command: the lock it carries and how it ends."""

from __future__ import annotations

import threading
from contextlib import ExitStack

from opencode_sandbox.errors import SandboxError
from opencode_sandbox.services.daemon_control import BackgroundStart


def test_the_held_lock_is_released_only_after_the_start() -> None:
    released = threading.Event()
    may_finish = threading.Event()
    held = ExitStack()
    held.callback(released.set)
    start = BackgroundStart(lambda: may_finish.wait(5) and None, held)
    assert not released.wait(0.2)
    may_finish.set()
    assert start.finish() is None
    assert released.is_set()


def test_a_failed_start_is_reported_and_still_releases() -> None:
    released = threading.Event()
    held = ExitStack()
    held.callback(released.set)

    def failing() -> None:
        raise SandboxError("opencode is not on the PATH", hint="rebuild")

    failure = BackgroundStart(failing, held).finish()
    assert isinstance(failure, SandboxError) and str(failure) == "opencode is not on the PATH"
    assert released.is_set()


def test_a_start_that_takes_too_long_is_reported() -> None:
    may_finish = threading.Event()
    start = BackgroundStart(lambda: may_finish.wait(5) and None, ExitStack())
    failure = start.finish(timeout_s=0.1)
    may_finish.set()
    assert failure is not None and "still being started" in str(failure)
