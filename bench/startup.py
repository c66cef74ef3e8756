"""`opencode-sandbox --help` and `version` against a bare `python -c pass`, side by side.

Target: each ratio at most 6 (heavy imports stay lazy). The last line is the worst ratio.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import interleaved_medians, isolated_environment, launcher, time_command

TARGET = 6.0


def main(rounds: int = 30) -> float:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = isolated_environment(root)
        project = root / "project"
        project.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=project, check=True)
        subprocess.run(["git", "remote", "add", "origin", "git@example.org:team/app.git"], cwd=project, check=True)
        tool = launcher()
        medians = interleaved_medians(
            {
                "python -c pass": lambda: time_command([sys.executable, "-c", "pass"], project, env),
                "opencode-sandbox --help": lambda: time_command([*tool, "--help"], project, env),
                "opencode-sandbox version": lambda: time_command([*tool, "version"], project, env),
            },
            rounds=rounds,
        )
    baseline = medians["python -c pass"]
    worst = 0.0
    print(f"{'command':<28}{'median ms':>10}{'ratio':>8}   target <= {TARGET}")
    for name, seconds in medians.items():
        ratio = seconds / baseline
        if name != "python -c pass":
            worst = max(worst, ratio)
        print(f"{name:<28}{seconds * 1000:>10.1f}{ratio:>8.2f}")
    print(f"startup ratio (worst of --help, version vs python -c pass): {worst:.2f}")
    return worst


if __name__ == "__main__":
    main()
