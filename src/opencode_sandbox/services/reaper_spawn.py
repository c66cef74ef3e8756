"""Starting the project's idle reaper: light enough for every client's start and exit path.

The reaper itself (`services/reaper.py`) loads the quiescence rules and the daemon client;
a detaching client only needs to record the settings and, when no reaper runs, start one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from opencode_sandbox.services.reaper_settings import ReaperSettings, save_settings
from opencode_sandbox.state.files import ensure_private_dir
from opencode_sandbox.state_layout import StateLayout


@contextlib.contextmanager
def reaper_lock(state_root: Path, slug: str) -> Iterator[bool]:
    """Yields whether this process is the project's one reaper; held until the block ends."""
    project = StateLayout(state_root).project(slug)
    ensure_private_dir(project.folder)
    descriptor = os.open(project.reaper_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)


def reaper_running(state_root: Path, slug: str) -> bool:
    """True while another process holds the project's reaper lock."""
    with reaper_lock(state_root, slug) as mine:
        return not mine


def spawn_reaper(settings: ReaperSettings) -> int:
    """Save the settings and start a detached reaper; returns its process id (0: one runs).

    Call it when a client is attached (so a client killed outright still leaves a VM that
    stops) and when it leaves. When a reaper already watches the project, no process starts:
    the running one picks the new settings up.
    """
    save_settings(settings.with_new_generation())
    if reaper_running(settings.state_root, settings.slug):
        # It reloads the settings, sees the new generation and restarts its idle timer.
        return 0
    import subprocess

    log_path = settings.project().reaper_log
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        process = subprocess.Popen(
            reaper_command(settings.state_root, settings.slug),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=descriptor,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    finally:
        os.close(descriptor)
    return process.pid


def reaper_command(state_root: Path, slug: str) -> list[str]:
    return [sys.executable, "-m", "opencode_sandbox.services.reaper", "--state-root", str(state_root), "--slug", slug]
