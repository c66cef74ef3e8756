"""Run every benchmark in `bench/` and print one table of their figures against their targets.

Each benchmark runs as its own subprocess and prints its ratio as the last number of its
last line; the figure and its raw baseline are read from the lines before.
Run: .venv/bin/python bench/report.py
`tests/performance` runs the benchmarks that fit in CI through `rows_of_runs` and fails on a
ratio above its target by more than `NOISE_ALLOWANCE`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
NOISE_ALLOWANCE = 0.10
"""How far above its target a ratio may land in the CI check before it fails. On a shared 2-core
machine repeated runs of one benchmark spread by up to 0.1 either way around their median (the
warm start measured 1.83 to 1.94 against its 2.0); a regression of the kind this check is for
(a start made 40 % slower by work nobody timed) lands far beyond it."""

Extract = Callable[[list[str]], tuple[str, str]]
"""The output's lines -> (figure, raw baseline), as printed."""


def first(pattern: str, lines: list[str], occurrence: int = 0) -> str:
    found = [match.group(1) for line in lines if (match := re.search(pattern, line))]
    return found[occurrence] if len(found) > occurrence else "?"


def startup(lines: list[str]) -> tuple[str, str]:
    help_ms, version_ms = first(r"--help\s+([\d.]+)", lines), first(r"version\s+([\d.]+)\s", lines)
    python_ms = first(r"-c pass\s+([\d.]+)", lines)
    return f"--help {help_ms} ms, version {version_ms} ms", f"{python_ms} ms"


def runtime(lines: list[str]) -> tuple[str, str]:
    rows = [line.split() for line in lines if re.match(r"^(create|get|exec|stop|start)\s", line)]
    worst = max(rows, key=lambda row: float(row[3]), default=None)
    return (f"{worst[0]} {worst[1]} ms", f"{worst[2]} ms") if worst else ("?", "?")


def warm_row(label: str) -> Extract:
    def extract(lines: list[str]) -> tuple[str, str]:
        row = next((line.split() for line in lines if re.match(rf"{label}\s+[\d.]+\s", line)), None)
        return (f"{row[-4]} ms", f"{row[-3]} ms") if row else ("?", "?")

    return extract


def agent_row(name: str, baseline_column: int) -> Extract:
    """The launcher's time and one baseline's from `agent_interface.py`'s table row of agent `name`."""
    def extract(lines: list[str]) -> tuple[str, str]:
        row = next((line.split() for line in lines if line.split()[:1] == [name]), None)
        return (f"{row[1]} ms", f"{row[baseline_column]} ms") if row and len(row) == 8 else ("?", "?")

    return extract


@dataclass(frozen=True)
class Benchmark:
    script: str
    measured: str
    baseline: str
    target: float
    """The ratio must be at most this."""
    extract: Extract
    ratio_line: str | None = None
    """The prefix of the line holding the ratio, when not the last line."""


def agent_rows() -> tuple[Benchmark, ...]:
    """Two rows per terminal agent: what the launcher adds to the agent's session alone (in ms), and the
    launcher against the bare agent."""
    from opencode_sandbox.core.agents import PROFILES, SessionKind

    rows: list[Benchmark] = []
    for profile in PROFILES.values():
        if profile.session is SessionKind.TERMINAL:
            rows += [Benchmark("agent_interface", f"to {profile.title}'s interface, VM running",
                               "its tmux session by docker exec -it (ms added)", 60.0, agent_row(profile.name, 2),
                               ratio_line=f"{profile.name} added ms"),
                     Benchmark("agent_interface", f"to {profile.title}'s interface, VM running",
                               f"docker exec -it {profile.command}", 1.25, agent_row(profile.name, 5),
                               ratio_line=f"{profile.name} ratio")]
    return tuple(rows)


BENCHMARKS = (
    Benchmark("startup", "--help, version", "python -c pass", 6.0, startup),
    Benchmark("image", "no-op image check", "cached docker build", 0.5,
              lambda lines: (first(r"no-op ensure_project_image:\s+([\d.]+ ms)", lines),
                             first(r"cached docker build:\s+([\d.]+ ms)", lines))),
    Benchmark("runtime", "DockerRuntime, worst operation", "docker CLI", 1.3, runtime),
    Benchmark("runtime_msb_load", "streamed load, launcher peak", "save -o + load -i", 1.05,
              lambda lines: (first(r"peak\s+([\d.]+ MiB)", lines), first(r"peak\s+([\d.]+ MiB)", lines, 1))),
    Benchmark("prune_plan", "plan 10,000 artifacts", "plan 1,000", 12.0,
              lambda lines: (first(r"^10,000 artifacts:\s+([\d.]+ ms)", lines),
                             first(r"^1,000 artifacts:\s+([\d.]+ ms)", lines))),
    Benchmark("git_fast_forward", "host fast-forward, 200,000 files", "update-ref + update-index", 1.5,
              lambda lines: (first(r"^\s*200000\s+([\d.]+)", lines) + " ms",
                             (lambda row: row[2] + " ms" if row else "?")(
                                 next((line.split() for line in lines if line.split()[:1] == ["200000"]), None)))),
    Benchmark("large_checkout", "shell -- true, VM running, 200,000 files", "the same on one file", 1.3,
              lambda lines: (first(r"^warm start, 200000 files\s+([\d.]+ms)", lines),
                             first(r"^warm start, one file\s+([\d.]+ms)", lines))),
    Benchmark("screen_relay", "100 full redraws, filtered", "the same relay unfiltered", 6.0,
              lambda lines: (first(r"^filtered\s+([\d.]+ ms)", lines), first(r"^bare copy\s+([\d.]+ ms)", lines))),
    Benchmark("warm_start", "shell -- true, VM stopped", "docker start + exec", 1.5, warm_row("after stop"),
              ratio_line="after-stop ratio"),
    Benchmark("warm_start", "shell -- true, VM running", "docker exec", 2.0, warm_row("warm")),
    Benchmark("warm_start_isolated", "shell -- true, VM stopped, isolated", "docker start + exec", 1.5,
              warm_row("after stop"), ratio_line="after-stop ratio"),
    Benchmark("warm_start_isolated", "shell -- true, VM running, isolated", "docker exec", 2.0, warm_row("warm")),
    Benchmark("time_to_interface", "from nothing to opencode's interface", "docker build, run, exec serve, attach",
              1.2, lambda lines: (first(r"^launcher\s+([\d.]+)", lines) + " s",
                                  first(r"^docker alone\s+([\d.]+)", lines) + " s")),
    *agent_rows(),
    Benchmark("msb_warm_start", "shell -- true, microVM stopped", "msb start + exec", 1.5, warm_row("after stop"),
              ratio_line="after-stop ratio"),
    Benchmark("msb_warm_start", "shell -- true, microVM running", "msb exec", 1.5, warm_row("warm"),
              ratio_line="warm ratio"),
    Benchmark("msb_warm_start", "to opencode's interface, microVM running", "msb exec -t attach", 1.2,
              warm_row("interface"), ratio_line="interface ratio"),
)


@dataclass(frozen=True)
class Row:
    benchmark: Benchmark
    figure: str
    baseline: str
    ratio: float | None
    skipped: bool = False

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.ratio is None:
            return "failed"
        return "met" if self.ratio <= self.benchmark.target else "not met"

    @property
    def within_allowance(self) -> bool:
        """Met, or missed by no more than `NOISE_ALLOWANCE`; a skipped benchmark counts as within."""
        return self.skipped or (self.ratio is not None
                                and self.ratio <= self.benchmark.target * (1 + NOISE_ALLOWANCE))

    def cells(self) -> tuple[str, ...]:
        bench = self.benchmark
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}"
        return (bench.script, f"{bench.measured}: {self.figure}", f"{bench.baseline}: {self.baseline}", ratio,
                f"<= {bench.target:g}", self.verdict)


def last_number(line: str) -> float | None:
    numbers = NUMBER.findall(line)
    return float(numbers[-1]) if numbers else None


def run_script(script: str, arguments: Sequence[str] = ()) -> list[str] | None:
    print(f"running {script} ...", file=sys.stderr, flush=True)
    result = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *arguments], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        sys.stderr.write(f"{script} failed:\n{result.stderr[-2000:]}\n")
        return None
    return [line for line in result.stdout.splitlines() if line.strip()]


def row_of(benchmark: Benchmark, lines: list[str] | None) -> Row:
    if not lines:
        return Row(benchmark, "-", "-", None)
    if lines[-1].startswith("skipped:"):  # e.g. microVMs cannot boot on this host
        return Row(benchmark, lines[-1].removeprefix("skipped:").strip(), "-", None, skipped=True)
    ratio_line = lines[-1] if benchmark.ratio_line is None else next(
        (line for line in lines if line.startswith(benchmark.ratio_line)), "")
    figure, baseline = benchmark.extract(lines)
    return Row(benchmark, figure, baseline, last_number(ratio_line))


def rows_of_runs(runs: Mapping[str, Sequence[str]]) -> list[Row]:
    """The rows of the benchmarks of each script in `runs`, each script run once with its arguments."""
    outputs = {script: run_script(script, arguments) for script, arguments in runs.items()}
    return [row_of(benchmark, outputs[benchmark.script]) for benchmark in BENCHMARKS if benchmark.script in runs]


def table(rows: list[Row]) -> list[str]:
    header = ("benchmark", "figure", "raw baseline", "ratio", "target", "result")
    cells = [header] + [row.cells() for row in rows]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in cells]


def main() -> int:
    outputs: dict[str, list[str] | None] = {}
    for benchmark in BENCHMARKS:
        if benchmark.script not in outputs:
            outputs[benchmark.script] = run_script(benchmark.script)
    rows = [row_of(benchmark, outputs[benchmark.script]) for benchmark in BENCHMARKS]
    for line in table(rows):
        print(line)
    return 0 if all(row.verdict in ("met", "skipped") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
