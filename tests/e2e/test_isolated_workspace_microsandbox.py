"""The isolated workspace on a booting microVM (the lab, as root and as `tester`)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project
from tests.e2e.isolated_scenarios import (
    a_renamed_branch_keeps_the_sync_going,
    a_switch_asks_first,
    apply_takes_the_plain_edits_and_none_of_the_flagged,
    host_commits_reach_the_vm,
    nothing_of_the_checkout_is_mounted,
    planted_git_runs_nothing_on_the_host,
    the_vm_starts_from_what_the_user_sees,
    the_vms_work_outlives_its_vm,
    the_vms_work_reaches_the_host_as_refs_only,
)

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]


@pytest.mark.timeout(2400)  # about fifteen commands, each seconds long in an emulated microVM
def test_the_isolated_microvm_works_on_its_own_tree_and_its_work_returns_as_git_data(msb_project: Project) -> None:
    project = msb_project
    the_vm_starts_from_what_the_user_sees(project)
    nothing_of_the_checkout_is_mounted(project)
    the_vms_work_reaches_the_host_as_refs_only(project)
    host_commits_reach_the_vm(project)
    a_renamed_branch_keeps_the_sync_going(project)
    planted_git_runs_nothing_on_the_host(project)
    apply_takes_the_plain_edits_and_none_of_the_flagged(project)
    a_switch_asks_first(project)
    the_vms_work_outlives_its_vm(project)
    assert project.vms() == [project.vm], "one VM for the project, made again after stop -f on the kept work tree"
