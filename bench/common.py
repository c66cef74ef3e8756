"""Shared helpers for the benchmarks: run commands side by side and compare medians."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def launcher() -> list[str]:
    """The installed console script, run the way a user runs it.

    `pip install .` byte-compiles the package; an editable install under
    PYTHONDONTWRITEBYTECODE never does, and would have every run compile its modules anew,
    a cost no user sees. The package is compiled here as an install would have done.
    """
    import compileall

    import opencode_sandbox

    compileall.compile_dir(str(Path(opencode_sandbox.__file__).parent), quiet=1)
    script = shutil.which("opencode-sandbox", path=str(Path(sys.executable).parent)) or shutil.which(
        "opencode-sandbox"
    )
    if script is None:
        raise SystemExit("opencode-sandbox is not installed in this environment")
    return [script]


def time_command(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def interleaved_medians(
    measures: dict[str, Callable[[], float]], rounds: int, warmup: int = 2
) -> dict[str, float]:
    """Run each measure once per round, in turn, so machine noise hits all of them alike."""
    for _ in range(warmup):
        for measure in measures.values():
            measure()
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(rounds):
        for name, measure in measures.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def isolated_environment(root: Path) -> dict[str, str]:
    """HOME, XDG folders and MSB_HOME inside `root`, so a benchmark never touches real state."""
    env = dict(os.environ)
    env["HOME"] = str(root)
    for variable, folder in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_DATA_HOME", ".local/share"),
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
        env[variable] = str(root / folder)
    env["MSB_HOME"] = str(root / ".microsandbox")
    return env
