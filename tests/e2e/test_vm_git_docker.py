"""The VM's own git directory on the docker runtime, as the test's user and as uid 1001."""

from __future__ import annotations

import time

from opencode_sandbox.services.vm_git import RACY_S
from tests.e2e.git_scenarios import (
    SYNC_WITHIN_S,
    a_gitlink_and_nested_repositories_run_nothing,
    a_gitlink_commit_is_held_and_runs_nothing,
    commits_travel_both_ways,
    guarded_files_are_put_back_while_the_vm_runs,
    the_host_git_dir_is_out_of_reach,
    the_slug_comes_from_the_host,
)
from tests.e2e.harness import Project, docker, git, wait_until


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


def git_syncs_in_the_vm(project: Project, since: float) -> list[str]:
    """The execs of the git sync the engine recorded in the VM since `since`."""
    listed = docker("events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}", "--filter", "type=container",
                    "--filter", f"container={project.vm}", "--format", "{{.Action}}", check=True).stdout
    return [line for line in listed.splitlines() if line.startswith("exec_create") and "fast-forward" in line]


def test_a_start_asks_the_vm_about_git_only_when_either_side_changed(any_user_project: Project) -> None:
    project = any_user_project
    assert project.shell("true").returncode == 0
    time.sleep(RACY_S + 0.5)  # past the window in which a ref's change may not show in its time
    assert project.shell("true").returncode == 0  # it looks, and notes how both sides stand
    began = time.time()
    assert project.shell("true").returncode == 0
    assert git_syncs_in_the_vm(project, began) == [], "nothing changed on either side: the VM is not asked"

    (project.root / "host.txt").write_text("host\n")
    git(project.root, "add", "host.txt")
    git(project.root, "commit", "-q", "-m", "on the host")
    began = time.time()
    assert project.shell("git rev-parse host/main").stdout.strip() == git(project.root, "rev-parse", "HEAD")
    assert git_syncs_in_the_vm(project, began), "a host commit is passed on before the command"

    time.sleep(RACY_S + 0.5)
    made = project.backend().exec(project.vm, ["git", "-c", "user.name=a", "-c", "user.email=a@example.org",
                                                "commit", "-q", "--allow-empty", "-m", "in the vm"])
    assert made.exit_code == 0, made.stderr
    assert wait_until(lambda: git(project.root, "log", "-1", "--format=%s", "refs/sandbox/heads/main") == "in the vm",
                      SYNC_WITHIN_S), "a commit made in the VM after the last sync is taken"


def test_a_gitlink_the_vm_commits_runs_nothing_on_the_host(any_user_project: Project) -> None:
    a_gitlink_commit_is_held_and_runs_nothing(any_user_project, as_root=False)
    a_gitlink_commit_is_held_and_runs_nothing(any_user_project, as_root=True)
