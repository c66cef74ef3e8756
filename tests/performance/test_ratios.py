"""The benchmarks of the waits a person notices, run in CI against their targets.

Each ratio is measured side by side in one process (`bench/`), with fewer rounds than
`bench/report.py` uses, and fails the test when it lands above its target by more than the noise
allowance written down in `bench/report.py` (`NOISE_ALLOWANCE`). The benchmarks that need a host
where microVMs boot, or minutes, stay with `bench/report.py` and the lab.
"""

from __future__ import annotations

import pytest
from bench import report

from tests.fixtures.images import RunnerBase

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

CI_RUNS = {"startup": ["10"], "prune_plan": [], "warm_start": ["10"], "screen_relay": ["5"]}
"""Each script with its arguments: rounds enough for a median that holds, few enough for a minute."""
SLOWED_BY_MS = 100
"""A start this much later: about half as slow again as a warm `shell` and as one after a stop on a
slow host (a raw `docker start` and `docker exec` of 200 ms), and more on a faster one. 60 ms no
longer sufficed there once the start after a stop took 1.4 times the raw commands: 1.64, inside the
allowance."""


def missed(rows: list[report.Row]) -> list[tuple[str, ...]]:
    return [row.cells() for row in rows if not row.within_allowance]


def test_the_waits_a_person_notices_stay_within_their_targets(runner_base_image: RunnerBase) -> None:
    rows = report.rows_of_runs(CI_RUNS)
    assert {row.benchmark.script for row in rows} == set(CI_RUNS)
    assert all(row.ratio is not None for row in rows), [row.cells() for row in rows]
    assert missed(rows) == [], "\n".join(report.table(rows))


def test_the_check_fails_on_a_deliberately_slowed_start(runner_base_image: RunnerBase) -> None:
    rows = report.rows_of_runs({"warm_start": ["3", "--slowed-by", str(SLOWED_BY_MS)]})
    assert len(rows) == 2 and all(row.ratio is not None for row in rows), [row.cells() for row in rows]
    assert len(missed(rows)) == 2, "\n".join(report.table(rows))
