"""An attached session ended from the host side (Ctrl-C, a hang-up, a kill of the launcher): msb is
asked to end, so it can give the terminal back as it found it, and is killed only if it does not."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.runtime.microsandbox import backend as microsandbox_backend
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import MsbCli


def _msb_standing_in(folder: Path, on_term: str) -> Path:
    """An `msb attach` that says when it runs and what it does on SIGTERM."""
    script = folder / "msb"
    script.write_text(f"""#!/bin/sh
trap '{on_term}' TERM
echo running > {folder}/started
while :; do sleep 0.05; done
""")
    script.chmod(0o755)
    return script


@pytest.fixture(autouse=True)
def _ctrl_c_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here as in a user's terminal, even in a suite started with
    Ctrl-C ignored (in the background of a script)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_once_started(folder: Path) -> threading.Thread:
    main = threading.main_thread().ident
    assert main is not None

    def interrupt() -> None:
        deadline = time.monotonic() + 30
        while not (folder / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main, signal.SIGINT)

    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    return thread


def test_msb_is_asked_to_end_and_ends(tmp_path: Path) -> None:
    msb = _msb_standing_in(tmp_path, f"echo asked > {tmp_path}/ended; exit 143")
    runtime = MicrosandboxRuntime(cli=MsbCli(msb))
    interrupter = _interrupt_once_started(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        runtime.attach("vm", ["opencode", "attach"])
    interrupter.join()
    assert (tmp_path / "ended").read_text() == "asked\n"


def test_ctrl_c_while_msb_starts_still_ends_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C lands while `subprocess.Popen` waits for msb's exec (msb already runs): before, the
    interrupted start left msb running with no one to end it."""
    msb = _msb_standing_in(tmp_path, f"echo asked > {tmp_path}/ended; exit 143")
    real_popen = subprocess.Popen

    def popen_interrupted_on_return(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started = real_popen(*args, **kwargs)
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.1)  # the interrupt would surface here, inside the start
        return started

    monkeypatch.setattr(microsandbox_backend.subprocess, "Popen", popen_interrupted_on_return)
    runtime = MicrosandboxRuntime(cli=MsbCli(msb))
    with pytest.raises(KeyboardInterrupt):
        runtime.attach("vm", ["opencode", "attach"])
    assert (tmp_path / "ended").read_text() == "asked\n"


def test_msb_that_does_not_end_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(microsandbox_backend, "ATTACH_END_GRACE_S", 0.5)
    msb = _msb_standing_in(tmp_path, f"echo ignored >> {tmp_path}/ended")
    runtime = MicrosandboxRuntime(cli=MsbCli(msb))
    interrupter = _interrupt_once_started(tmp_path)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runtime.attach("vm", ["opencode", "attach"])
    interrupter.join()
    assert time.monotonic() - started < 20
    assert (tmp_path / "ended").read_text() == "ignored\n", "asked once, then killed"
