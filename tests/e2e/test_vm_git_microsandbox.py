"""The VM's own git directory on a booting microVM (the lab, as root and as `tester`)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.git_scenarios import (
    a_gitlink_and_nested_repositories_run_nothing,
    a_gitlink_commit_is_held_and_runs_nothing,
    commits_travel_both_ways,
    guarded_files_are_put_back_while_the_vm_runs,
    the_host_git_dir_is_out_of_reach,
    the_slug_comes_from_the_host,
)
from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]


@pytest.mark.timeout(2400)  # about twenty commands, each seconds long in an emulated microVM
def test_the_agent_cannot_reach_the_hosts_git_in_a_microvm_and_commits_travel_both_ways(
    msb_project: Project,
) -> None:
    project = msb_project
    the_host_git_dir_is_out_of_reach(project, as_root=False)
    the_host_git_dir_is_out_of_reach(project, as_root=True)
    a_gitlink_and_nested_repositories_run_nothing(project)
    guarded_files_are_put_back_while_the_vm_runs(project)
    the_slug_comes_from_the_host(project)
    commits_travel_both_ways(project)
    assert project.vms() == [project.vm], "every step ran in the project's one VM"
    assert not (project.root / ".git" / "commondir").exists() and not (project.root / ".git" / "x").exists()


@pytest.mark.timeout(2400)
def test_a_gitlink_the_vm_commits_runs_nothing_on_the_host_of_a_microvm(msb_project: Project) -> None:
    a_gitlink_commit_is_held_and_runs_nothing(msb_project, as_root=False)
    a_gitlink_commit_is_held_and_runs_nothing(msb_project, as_root=True)
