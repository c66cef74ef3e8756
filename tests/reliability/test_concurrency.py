"""Many launchers at once on fresh projects: one VM and one home volume per project, every run succeeds."""

from __future__ import annotations

import concurrent.futures
import subprocess
from collections.abc import Callable

import pytest

from tests.e2e.harness import Project, ServeOnly

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

RUNS = 16
SERVERS_ASKED = 4


def run_all(targets: list[Project]) -> list[subprocess.CompletedProcess[str]]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(targets)) as pool:
        return list(pool.map(lambda target: target.cli("shell", "--", "true"), targets))


def assert_all_succeeded(results: list[subprocess.CompletedProcess[str]]) -> None:
    assert [result.returncode for result in results] == [0] * len(results), [
        result.stderr for result in results if result.returncode != 0
    ]
    assert not any("Traceback" in result.stderr for result in results)


def test_sixteen_runs_on_one_fresh_project_share_one_vm(project: Project) -> None:
    results = run_all([project] * RUNS)
    assert_all_succeeded(results)
    assert project.vms() == [project.vm]
    assert project.container_state() == "running"
    assert len(project.home_volumes()) == 1
    assert sum("Creating the home volume" in result.stderr for result in results) == 1
    assert sum(f"Creating {project.vm}" in result.stderr for result in results) == 1
    assert project.serve_processes() == 0, "a shell starts no opencode serve"
    with concurrent.futures.ThreadPoolExecutor(max_workers=SERVERS_ASKED) as pool:
        clients = list(pool.map(lambda _: ServeOnly(project), range(SERVERS_ASKED)))
    try:
        assert project.serve_processes() == 1, "clients asking at once share one server"
    finally:
        for client in clients:
            client.detach()


def test_sixteen_runs_over_four_fresh_projects_make_one_vm_each(
    projects: Callable[[int], list[Project]],
) -> None:
    four = projects(4)
    results = run_all([four[index % 4] for index in range(RUNS)])
    assert_all_succeeded(results)
    for target in four:
        assert target.vms() == [target.vm]
        assert target.container_state() == "running"
        assert len(target.home_volumes()) == 1
    assert len({target.container_id() for target in four}) == 4
