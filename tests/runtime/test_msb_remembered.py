"""What the microsandbox backend asks msb, on a scripted msb: a runtime serving one command asks
about each VM, image and volume once and again only after it changed that object itself; a
watcher's runtime asks every time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, vm_name
from opencode_sandbox.errors import NotOurs
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec, SandboxStatus
from tests.fakes.image_engine import FakeImageEngine
from tests.fixtures.scripted_msb import ScriptedMsb, answer, not_found

SLUG = "remembered-0123456789abcd"
NAME = vm_name(SLUG)
IMAGE = f"opencode-sandbox/runner-{SLUG}:c0ffee"
VOLUME = home_volume_name(SLUG)
PORTS = {"ports": [{"guest_port": 4096, "host_port": 50000, "protocol": "tcp"}]}


def inspected(status: str) -> dict[str, object]:
    config = {"labels": managed_labels(SLUG), "network": PORTS}
    return {"name": NAME, "status": status, "config": config}


def vm(*statuses: str) -> list[dict[str, object]]:
    return [answer(json.dumps(inspected(status))) for status in statuses]


def volume_text(labels: dict[str, str]) -> str:
    listed = ", ".join(f"{key}={value}" for key, value in labels.items()) or "-"
    return (f"Name:                 {VOLUME}\nKind:                 dir\nQuota:                unlimited\n"
            f"Path:                 /msb/volumes/{VOLUME}\nCreated:              2030-01-01 00:00:00\n"
            f"Labels:               {listed}\n")


def runtime_of(scripted: ScriptedMsb, one_command: bool = True) -> MicrosandboxRuntime:
    return MicrosandboxRuntime(cli=scripted.cli, kvm_probe=lambda: KvmCheck(True), one_command=one_command)


def test_one_inspect_answers_the_vm_s_state_and_its_ports(tmp_path: Path) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {"inspect": vm("Running")})
    runtime = runtime_of(scripted)
    info = runtime.get_sandbox(NAME)
    assert info is not None and info.status is SandboxStatus.RUNNING
    assert runtime.port_map(NAME) == {4096: 50000}
    assert runtime.host_port(NAME, 4096) == 50000
    assert scripted.calls == [["inspect", NAME, "--format", "json"]]


def test_the_vm_is_asked_again_after_the_runtime_started_it(tmp_path: Path) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {"inspect": vm("Stopped", "Running"), "start": [answer()]})
    runtime = runtime_of(scripted)
    assert runtime.port_map(NAME) == {}  # stopped: nothing is published
    runtime.start_sandbox(NAME)
    assert runtime.port_map(NAME) == {4096: 50000}
    assert scripted.subcommands() == ["inspect", "start", "inspect"]


@pytest.mark.parametrize("change", ["stop_sandbox", "kill_sandbox", "remove_sandbox"])
def test_the_vm_is_asked_again_after_the_runtime_stopped_or_removed_it(tmp_path: Path, change: str) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {
        "inspect": [*vm("Running"), not_found("sandbox")], "stop": [answer()], "remove": [answer()]})
    runtime = runtime_of(scripted)
    getattr(runtime, change)(NAME)
    assert runtime.get_sandbox(NAME) is None
    assert scripted.subcommands().count("inspect") == 2


def test_a_vm_on_its_way_is_asked_again_every_time(tmp_path: Path) -> None:
    """A start that waits for another client's VM to come up sees it come up."""
    scripted = ScriptedMsb.at(tmp_path / "msb", {"inspect": vm("Starting", "Running")})
    runtime = runtime_of(scripted)
    statuses = [info.status for info in (runtime.get_sandbox(NAME), runtime.get_sandbox(NAME),
                                         runtime.get_sandbox(NAME)) if info is not None]
    assert statuses == [SandboxStatus.STARTING, SandboxStatus.RUNNING, SandboxStatus.RUNNING]
    assert scripted.subcommands() == ["inspect", "inspect"]


def test_a_watcher_s_runtime_asks_every_time(tmp_path: Path) -> None:
    """The idle reaper must see a VM stopped by other means."""
    scripted = ScriptedMsb.at(tmp_path / "msb", {"inspect": vm("Running", "Stopped")})
    runtime = runtime_of(scripted, one_command=False)
    first, second = runtime.get_sandbox(NAME), runtime.get_sandbox(NAME)
    assert first is not None and second is not None
    assert (first.status, second.status) == (SandboxStatus.RUNNING, SandboxStatus.STOPPED)


def test_a_listing_asks_every_sandbox_afresh(tmp_path: Path) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {"inspect": vm("Running", "Stopped"),
                                                  "list": [answer(json.dumps([{"name": NAME}]))]})
    runtime = runtime_of(scripted)
    assert runtime.get_sandbox(NAME) is not None
    [listed] = runtime.list_sandboxes()
    assert listed.status is SandboxStatus.STOPPED
    assert scripted.subcommands() == ["inspect", "list", "inspect"]


def test_a_volume_is_found_with_one_inspect(tmp_path: Path) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {"volume inspect": [answer(volume_text(managed_labels(SLUG)))]})
    runtime = runtime_of(scripted)
    info = runtime.get_volume(VOLUME)
    assert info is not None and info.labels == managed_labels(SLUG) and info.kind == "dir"
    assert runtime.get_volume(VOLUME) == info
    assert scripted.calls == [["volume", "inspect", VOLUME]]


def test_a_missing_volume_is_none_and_a_look_alike_is_not_ours(tmp_path: Path) -> None:
    missing = ScriptedMsb.at(tmp_path / "missing", {"volume inspect": [not_found("volume")]})
    assert runtime_of(missing).get_volume(VOLUME) is None
    foreign = ScriptedMsb.at(tmp_path / "foreign", {"volume inspect": [answer(volume_text({"a": "b"}))]})
    with pytest.raises(NotOurs):
        runtime_of(foreign).get_volume(VOLUME)


def test_a_created_or_removed_volume_is_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A create looks afresh for a volume made meanwhile, as before it makes anything."""
    from opencode_sandbox.runtime.microsandbox import backend

    made: list[str] = []

    def call_sdk(operation: str, payload: dict[str, object]) -> dict[str, object]:
        made.append(str(payload["name"]))
        return {}

    monkeypatch.setattr(backend, "call_sdk", call_sdk)
    scripted = ScriptedMsb.at(tmp_path / "msb", {
        "volume inspect": [not_found("volume"), not_found("volume"), answer(volume_text(managed_labels(SLUG))),
                           not_found("volume")],
        "volume remove": [answer()], "list": [answer("[]")]})
    runtime = runtime_of(scripted)
    assert runtime.get_volume(VOLUME) is None
    assert runtime.create_volume(VOLUME, managed_labels(SLUG)).name == VOLUME
    runtime.remove_volume(VOLUME)
    assert runtime.get_volume(VOLUME) is None
    assert made == [VOLUME]
    assert [" ".join(call[:2]) for call in scripted.calls] == [
        "volume inspect", "volume inspect", "volume inspect", "list --format", "volume remove", "volume inspect"]


def test_a_create_asks_the_image_already_asked_no_more_and_the_vm_afresh(tmp_path: Path) -> None:
    """The image step asked for the image; the VM step found no VM: the create still looks for a
    VM made meanwhile, and asks again once it made one."""
    engine = FakeImageEngine()
    image = {"reference": IMAGE, "config": {"digest": engine.add_image(IMAGE)}}
    scripted = ScriptedMsb.at(tmp_path / "msb", {
        "image inspect": [answer(json.dumps(image))],
        "inspect": [not_found("sandbox"), not_found("sandbox"), *vm("Running")],
        "create": [answer()],
    })
    runtime = MicrosandboxRuntime(cli=scripted.cli, kvm_probe=lambda: KvmCheck(True), images=engine, one_command=True)
    assert runtime.loaded_image(IMAGE) is not None
    assert runtime.get_sandbox(NAME) is None
    spec = SandboxSpec(NAME, IMAGE, 1, 512, labels=managed_labels(SLUG),
                       mounts=(Mount(MountKind.BIND, str(tmp_path), "/workspace"),))
    assert runtime.create_sandbox(spec).status is SandboxStatus.RUNNING
    assert scripted.subcommands() == ["image", "inspect", "inspect", "create", "inspect"]
