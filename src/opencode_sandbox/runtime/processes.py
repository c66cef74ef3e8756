"""Ending a runtime's client process the way a user's Ctrl-C would, never leaving it behind."""

from __future__ import annotations

import subprocess


def end_gently(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """Ask `process` to end, so it gives the terminal back as it found it; kill it only if it has
    not ended within `grace_s`."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
