"""`network log` lists what the project VM's policy refused, newest first, with the policy's reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.cli.render import render_refusals
from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import Refusal, RuntimeKind, SandboxStatus
from opencode_sandbox.services.network_log import refusals
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import SLUG, make_app, plant_project

VM = vm_name(SLUG)
NOW = datetime.now(UTC)


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    yield runtime
    runtime.close()


def test_refusals_are_listed_newest_first_with_the_reason_of_the_policy(fake: FakeRuntime, tmp_path: Path) -> None:
    plant_project(fake, SLUG, volume_time=NOW, status=SandboxStatus.RUNNING)
    fake.refuse(VM, Refusal("10.1.2.3", "tcp", 8080, 3, NOW - timedelta(minutes=5)))
    fake.refuse(VM, Refusal("203.0.113.9", "udp", 53, 1, NOW - timedelta(minutes=1)))
    policy = EgressPolicy(Profile.PUBLIC, deny=(parse_rule("203.0.113.0/24"),))
    name, found = refusals(make_app(fake, tmp_path))
    assert name == VM
    assert [refusal.destination for refusal in found] == ["203.0.113.9", "10.1.2.3"]

    table = render_refusals(name, found, policy, "table").splitlines()
    assert table[0].split() == ["LAST", "SEEN", "DESTINATION", "ATTEMPTS", "WHY"]
    assert "203.0.113.9:53/udp" in table[1] and "egress-deny 203.0.113.0/24" in table[1]
    assert "10.1.2.3:8080/tcp" in table[2] and " 3 " in table[2] and "a private address, in 10.0.0.0/8" in table[2]
    assert table[-1].startswith(f"{VM}, network public; egress-deny 203.0.113.0/24: what the policy refused")

    document = json.loads(render_refusals(name, found, policy, "json"))["result"]
    assert document[1] == {"destination": "10.1.2.3", "protocol": "tcp", "port": 8080, "attempts": 3,
                           "last_seen": (NOW - timedelta(minutes=5)).isoformat(timespec="seconds"),
                           "reason": "a private address, in 10.0.0.0/8 (the network profile is public)"}


def test_a_stopped_vm_has_nothing_to_show_and_a_missing_one_says_how_to_start(
    fake: FakeRuntime, tmp_path: Path,
) -> None:
    with pytest.raises(UsageError) as missing:
        refusals(make_app(fake, tmp_path))
    assert "has no VM" in missing.value.message and "opencode-sandbox" in (missing.value.hint or "")

    plant_project(fake, SLUG, volume_time=NOW, status=SandboxStatus.RUNNING)
    fake.refuse(VM, Refusal("10.1.2.3", "tcp", 8080, 1, NOW))
    fake.stop_sandbox(VM)
    name, found = refusals(make_app(fake, tmp_path))
    assert found is None
    text = render_refusals(name, found, EgressPolicy(Profile.NONE), "table")
    assert text.startswith(f"{VM} is stopped: what its network policy refuses is recorded only while it runs")
    assert json.loads(render_refusals(name, found, EgressPolicy(Profile.NONE), "json")) == {
        "command": "network log", "result": []}

    fake.start_sandbox(VM)
    name, found = refusals(make_app(fake, tmp_path))
    assert found == []
    text = render_refusals(name, found, EgressPolicy(Profile.NONE), "table")
    assert text.startswith(f"Nothing refused by {VM}'s network policy (none)")


def test_a_reason_the_runtime_recorded_is_shown_as_it_was() -> None:
    policy = EgressPolicy(Profile.PUBLIC)
    recorded = Refusal("other.example", "tcp", 80, 1, datetime(2026, 12, 1, tzinfo=UTC),
                       "the request carries the placeholder of the secret API_KEY to other.example")
    shown = json.loads(render_refusals("vm", [recorded], policy, "json"))["result"]
    assert shown[0]["reason"] == recorded.reason
    judged = json.loads(render_refusals("vm", [recorded._replace(reason="")], policy, "json"))["result"]
    assert judged[0]["reason"] == "refused by the policy the VM was started with"
