"""The guard on files the host runs, on a booting microVM: the guarded paths that exist are
mounted read-only over the checkout; root in the microVM can lift those mounts, so what changes
beneath them still counts as the VM's, and is reported and reverted before the host runs it."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.guard_scenarios import (
    a_flood_of_sparse_files_neither_fills_the_reapers_memory_nor_blinds_it,
    a_planted_hook_is_reverted_before_git_runs_it,
    every_file_the_host_runs_unasked_is_put_back,
    the_existing_guarded_paths_are_read_only,
)
from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]


def test_guarded_paths_are_read_only_in_the_microvm_and_what_root_changes_anyway_is_reverted(
    msb_project: Project,
) -> None:
    project = msb_project
    a_planted_hook_is_reverted_before_git_runs_it(project)
    the_existing_guarded_paths_are_read_only(project)
    assert not (project.root / ".opencode-sandbox" / "config.yaml").exists()

    lifted = project.cli("shell", "--root", "--", "sh", "-c",
                         "umount /workspace/.opencode-sandbox && echo 'network: all' > /workspace/.opencode-sandbox/"
                         "config.yaml")
    assert lifted.returncode == 0, "root in a microVM lifts the mount: " + lifted.stderr
    assert "changed while the VM ran" in lifted.stderr and ".opencode-sandbox/config.yaml: added" in lifted.stderr, \
        lifted.stderr
    assert not (project.root / ".opencode-sandbox" / "config.yaml").exists(), \
        "a change beneath a read-only path is the VM's"


def test_a_flood_of_sparse_files_in_a_guarded_folder_neither_fills_the_reapers_memory_nor_blinds_it(
    msb_project: Project,
) -> None:
    a_flood_of_sparse_files_neither_fills_the_reapers_memory_nor_blinds_it(msb_project)


def test_every_file_the_host_runs_unasked_that_the_vm_writes_is_put_back(msb_project: Project) -> None:
    every_file_the_host_runs_unasked_is_put_back(msb_project)
