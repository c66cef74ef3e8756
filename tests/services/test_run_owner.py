"""The run flow on a VM and home volume of another host user, or of an older version that labelled
no owner: the fake runtime acts for this user and reads this user's state folder, as the docker
runtime does."""

from __future__ import annotations

import os

import pytest

from opencode_sandbox.core.naming import LABEL_OWNER_UID
from opencode_sandbox.errors import OwnedByAnother
from opencode_sandbox.runtime.docker.owner import DockerOwner
from opencode_sandbox.runtime.types import SandboxStatus
from tests.services.app_fakes import SLUG
from tests.services.test_run_flow import VM, Flow, after_first_run, flow

__all__ = ["flow"]

STRANGER = os.getuid() + 1


def reading_the_state_folder(flow: Flow) -> None:
    flow.runtime.owner = DockerOwner(recorded_home=lambda slug: flow.app().state.load(slug).home_volume)


def test_a_vm_an_older_version_made_is_recreated_once_on_its_home_volume(flow: Flow) -> None:
    volume = after_first_run(flow)
    flow.write_home_file(volume, "kept across the upgrade")
    for labels in (flow.runtime.sandboxes[VM].labels, flow.runtime.volumes[volume].labels):
        del labels[LABEL_OWNER_UID]  # as an older version made them
    reading_the_state_folder(flow)

    flow.prepare()
    assert flow.calls("stop_sandbox", "remove_sandbox", "create_sandbox", "create_volume") == [
        "stop_sandbox", "remove_sandbox", "create_sandbox"]
    assert flow.runtime.sandboxes[VM].labels[LABEL_OWNER_UID] == str(os.getuid())
    assert flow.state().home_volume == volume and flow.volumes() == [volume]
    assert flow.home_file(volume) == "kept across the upgrade"
    assert LABEL_OWNER_UID not in flow.runtime.volumes[volume].labels, "Docker keeps a volume's labels"

    flow.runtime.calls.clear()
    flow.prepare()
    assert flow.calls("stop_sandbox", "remove_sandbox", "create_sandbox") == [], "once only"


def test_another_host_users_vm_is_refused_and_left_as_it_is(flow: Flow) -> None:
    after_first_run(flow)
    sandbox = flow.runtime.sandboxes[VM]
    sandbox.labels[LABEL_OWNER_UID] = str(STRANGER)
    created, status = sandbox.created_at, sandbox.status
    with pytest.raises(OwnedByAnother) as raised:
        flow.prepare()
    assert raised.value.message.startswith(f"the VM {VM} belongs to host user ")
    assert f"uid {STRANGER}" in raised.value.message and "`opencode-sandbox kill --force`" in (raised.value.hint or "")
    assert flow.calls("start_sandbox", "stop_sandbox", "kill_sandbox", "remove_sandbox", "create_sandbox") == []
    assert (sandbox.created_at, sandbox.status) == (created, status) and flow.runtime.sandboxes[VM] is sandbox


def test_an_older_vm_this_user_does_not_record_is_refused_and_left_as_it_is(flow: Flow) -> None:
    volume = after_first_run(flow)
    del flow.runtime.sandboxes[VM].labels[LABEL_OWNER_UID]
    reading_the_state_folder(flow)
    state = flow.app().state
    state.save(SLUG, state.load(SLUG)._replace(home_volume=volume + "0"))  # another home than the VM's
    with pytest.raises(OwnedByAnother, match="names no owner"):
        flow.prepare()
    assert flow.calls("stop_sandbox", "remove_sandbox", "create_sandbox") == []
    assert flow.runtime.sandboxes[VM].status is SandboxStatus.RUNNING
