"""The fake's own knobs: failure injection, scripted programs and the call log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, vm_name
from opencode_sandbox.errors import RuntimeUnavailable, VmDidNotBoot
from opencode_sandbox.runtime.types import ExecResult, Mount, MountKind, SandboxSpec, SandboxStatus
from tests.fakes.runtime import ExecCall, FakeRuntime

SLUG = "proj-0123456789abcd"
IMAGE = "opencode-sandbox/runner-proj-0123456789abcd:abc"


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime()
    runtime.add_docker_image(IMAGE)
    try:
        yield runtime
    finally:
        runtime.close()


def spec(tmp_path: Path) -> SandboxSpec:
    return SandboxSpec(
        name=vm_name(SLUG),
        image=IMAGE,
        cpus=1,
        memory_mib=512,
        labels=managed_labels(SLUG),
        mounts=(Mount(MountKind.BIND, str(tmp_path), "/workspace"),),
    )


def test_a_boot_failure_leaves_nothing_and_fires_once(fake: FakeRuntime, tmp_path: Path) -> None:
    fake.boot_failures = ["no kvm"]
    with pytest.raises(VmDidNotBoot, match="no kvm") as raised:
        fake.create_sandbox(spec(tmp_path))
    assert raised.value.cause == "no kvm"
    assert fake.get_sandbox(vm_name(SLUG)) is None
    assert fake.create_sandbox(spec(tmp_path)).status is SandboxStatus.RUNNING


def test_a_boot_failure_on_start_keeps_the_stopped_sandbox(
    fake: FakeRuntime, tmp_path: Path
) -> None:
    fake.create_sandbox(spec(tmp_path))
    fake.stop_sandbox(vm_name(SLUG))
    fake.boot_failures = ["disk full"]
    with pytest.raises(VmDidNotBoot):
        fake.start_sandbox(vm_name(SLUG))
    info = fake.get_sandbox(vm_name(SLUG))
    assert info is not None and info.status is SandboxStatus.STOPPED


def test_engine_down_makes_every_call_unavailable(fake: FakeRuntime) -> None:
    fake.engine_down = True
    for call in (fake.check_available, fake.list_sandboxes, fake.list_volumes):
        with pytest.raises(RuntimeUnavailable):
            call()
    with pytest.raises(RuntimeUnavailable):
        fake.get_sandbox(vm_name(SLUG))


def test_crash_reports_crashed(fake: FakeRuntime, tmp_path: Path) -> None:
    fake.create_sandbox(spec(tmp_path))
    fake.crash(vm_name(SLUG))
    info = fake.get_sandbox(vm_name(SLUG))
    assert info is not None and info.status is SandboxStatus.CRASHED


def test_scripted_program_and_call_log(fake: FakeRuntime, tmp_path: Path) -> None:
    seen: list[ExecCall] = []

    def opencode(call: ExecCall) -> ExecResult:
        seen.append(call)
        return ExecResult(0, "1.2.3\n", "")

    fake.on_exec("opencode", opencode)
    fake.create_sandbox(spec(tmp_path))
    result = fake.exec(vm_name(SLUG), ["opencode", "--version"], env={"A": "b"})
    assert result.stdout == "1.2.3\n"
    assert seen[0].argv == ("opencode", "--version") and seen[0].env["A"] == "b"
    assert seen[0].user == "dev"
    assert ("exec", vm_name(SLUG)) in fake.calls
    unknown = fake.exec(vm_name(SLUG), ["no-such-program"])
    assert unknown.exit_code == 127


def test_fill_copies_only_into_an_empty_volume(fake: FakeRuntime) -> None:
    volume = home_volume_name(SLUG)
    fake.create_volume(volume, managed_labels(SLUG))
    fake.fill_volume_from_image(volume, IMAGE)
    assert fake.volumes[volume].files[".profile"].owner == "dev"
    fake.volumes[volume].files[".profile"].data = "changed"
    fake.fill_volume_from_image(volume, IMAGE)
    assert fake.volumes[volume].files[".profile"].data == "changed"
