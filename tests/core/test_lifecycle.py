from __future__ import annotations

import pytest

from opencode_sandbox.core.lifecycle import (
    HomeAction,
    VmAction,
    VmPlan,
    fingerprint,
    needs_apply_prompt,
    plan_home_volume,
    plan_vm,
)
from opencode_sandbox.core.vm_status import SandboxStatus


def test_no_vm_is_created() -> None:
    assert plan_vm(None, None, "d1", None, "f1").action is VmAction.CREATE


@pytest.mark.parametrize(
    ("status", "action"),
    [
        (SandboxStatus.RUNNING, VmAction.CONNECT),
        (SandboxStatus.STOPPED, VmAction.START),
        (SandboxStatus.CRASHED, VmAction.START),
        (SandboxStatus.CREATED, VmAction.START),
        (SandboxStatus.PAUSED, VmAction.START),
        (SandboxStatus.UNKNOWN, VmAction.START),
        (SandboxStatus.STARTING, VmAction.WAIT),
        (SandboxStatus.DRAINING, VmAction.WAIT),
    ],
)
def test_up_to_date_vm_is_reused_by_status(status: SandboxStatus, action: VmAction) -> None:
    assert plan_vm(status, "d1", "d1", "f1", "f1").action is action


@pytest.mark.parametrize("status", list(SandboxStatus))
def test_new_image_recreates_whatever_the_status(status: SandboxStatus) -> None:
    plan = plan_vm(status, "d0", "d1", "f1", "f1")
    assert plan.action is VmAction.RECREATE
    assert plan.image_changed


def test_changed_settings_recreate_without_image_change() -> None:
    plan = plan_vm(SandboxStatus.RUNNING, "d1", "d1", "f0", "f1")
    assert plan.action is VmAction.RECREATE
    assert not plan.image_changed


@pytest.mark.parametrize("status", list(SandboxStatus))
def test_a_vm_without_its_owner_label_is_recreated_once_keeping_its_home(status: SandboxStatus) -> None:
    plan = plan_vm(status, "d1", "d1", "f1", "f1", owner_unlabelled=True)
    assert plan.action is VmAction.RECREATE and "without the label of its host user" in plan.reason
    assert not plan.image_changed, "the home volume is kept without asking"
    assert plan_home_volume("home-1", {"home-1"}, plan).action is HomeAction.USE


def test_an_image_change_outranks_the_missing_owner_label() -> None:
    plan = plan_vm(SandboxStatus.STOPPED, "d0", "d1", "f1", "f1", owner_unlabelled=True)
    assert plan.action is VmAction.RECREATE and plan.image_changed


def test_fingerprint_is_stable_and_order_free() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert len(fingerprint({})) == 16


CONNECT = VmPlan(VmAction.CONNECT, "")
CREATE = VmPlan(VmAction.CREATE, "")
IMAGE_RECREATE = VmPlan(VmAction.RECREATE, "", image_changed=True)
SETTINGS_RECREATE = VmPlan(VmAction.RECREATE, "")


def test_home_volume_created_when_none_recorded() -> None:
    plan = plan_home_volume(None, {"other"}, CREATE)
    assert (plan.action, plan.volume, plan.warning) == (HomeAction.CREATE, None, None)


def test_home_volume_missing_is_recreated_with_a_warning() -> None:
    plan = plan_home_volume("gone", {"other"}, CONNECT)
    assert plan.action is HomeAction.CREATE
    assert plan.warning == (
        "the home volume gone recorded for this project no longer exists; creating a fresh one"
    )


def test_home_volume_prompt_only_when_the_image_really_recreates_the_vm() -> None:
    assert plan_home_volume("v", {"v"}, IMAGE_RECREATE).action is HomeAction.ASK
    assert plan_home_volume("v", {"v"}, SETTINGS_RECREATE).action is HomeAction.USE
    assert plan_home_volume("v", {"v"}, CONNECT).action is HomeAction.USE
    assert plan_home_volume("v", {"v"}, CREATE).action is HomeAction.USE


@pytest.mark.parametrize(
    ("others", "disruptive", "expected"),
    [(0, True, False), (1, True, True), (3, False, False), (0, False, False)],
)
def test_apply_prompt_only_with_other_clients(others: int, disruptive: bool, expected: bool) -> None:
    assert needs_apply_prompt(others, disruptive) is expected


def test_the_provisioning_plan_tells_nothing_to_copy_from_nothing_changed() -> None:
    from opencode_sandbox.core.start_plan import plan_provision

    assert plan_provision([], any_files=False).line() == (
        "provisioning: keep (no opencode configuration on this host to copy)")
    assert plan_provision([]).line() == "provisioning: keep (the opencode configuration in the VM is current)"
    assert plan_provision([".config/opencode/opencode.json"]).line() == (
        "provisioning: copy (.config/opencode/opencode.json)")
    assert plan_provision([], agent="Claude Code").line() == (
        "provisioning: keep (the Claude Code configuration in the VM is current)")
