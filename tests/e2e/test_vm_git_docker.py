"""The VM's own git directory on the docker runtime, as the test's user and as uid 1001."""

from __future__ import annotations

from tests.e2e.git_scenarios import (
    a_gitlink_and_nested_repositories_run_nothing,
    commits_travel_both_ways,
    guarded_files_are_put_back_while_the_vm_runs,
    the_host_git_dir_is_out_of_reach,
    the_slug_comes_from_the_host,
)
from tests.e2e.harness import Project


def test_the_agent_cannot_reach_the_hosts_git_and_commits_travel_both_ways(any_user_project: Project) -> None:
    project = any_user_project
    the_host_git_dir_is_out_of_reach(project, as_root=False)
    the_host_git_dir_is_out_of_reach(project, as_root=True)
    a_gitlink_and_nested_repositories_run_nothing(project)
    guarded_files_are_put_back_while_the_vm_runs(project)
    the_slug_comes_from_the_host(project)
    commits_travel_both_ways(project)
    assert project.vms() == [project.vm], "every step ran in the project's one VM"
    assert not (project.root / ".git" / "commondir").exists() and not (project.root / ".git" / "x").exists()
