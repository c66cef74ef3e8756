"""Running the real command line in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_cli(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "opencode_sandbox", *args],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout,
        input=input_text, check=False,
    )
