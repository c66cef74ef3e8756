"""A VM that does not boot: one more attempt, then the lifecycle removes what the run made for it
(the VM, a home volume created for it), never an older home volume. On the fake runtime."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.naming import managed_labels, runner_image, vm_name
from opencode_sandbox.errors import BootFailed, VmDidNotBoot
from opencode_sandbox.runtime.types import SandboxInfo, SandboxSpec, SandboxStatus
from opencode_sandbox.services import vm_boot
from opencode_sandbox.services.image_step import ReadyImage, UpdateCheck
from opencode_sandbox.services.start import pipeline as run
from opencode_sandbox.services.start import vm_step
from opencode_sandbox.services.start.pipeline import Start
from opencode_sandbox.ui.console import Console, LogLevel
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import SLUG, make_app, messages

VM = vm_name(SLUG)
IMAGE = runner_image(SLUG, "c0ffee")
RETRY_NOTE = "the VM did not boot ({}); trying once more"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRuntime]:
    runtime = FakeRuntime()
    runtime.add_docker_image(IMAGE)
    image = ReadyImage(IMAGE, runtime.load_image(IMAGE).digest, {}, None, built=False)
    monkeypatch.setattr(run, "ensure_image", lambda app, rebuild, upgrade_to, agent_upgrade_to=None: image)
    monkeypatch.setattr(UpdateCheck, "start", lambda self: None)
    monkeypatch.setattr(Start, "_auto_prune", lambda self: None)
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture
def app(fake: FakeRuntime, tmp_path: Path) -> App:
    project = tmp_path / "project"
    project.mkdir()
    return make_app(fake, project)


def prepare(app: App) -> None:
    Start(app).prepare(False, 0, wait_for_daemon=False)


def boots(fake: FakeRuntime) -> list[str]:
    return [call for call, name in fake.calls if call in ("create_sandbox", "start_sandbox") and name == VM]


def test_a_vm_that_did_not_boot_is_tried_once_more(app: App, fake: FakeRuntime) -> None:
    fake.boot_failures = ["agent relay wait_ready failed"]
    prepare(app)
    info = fake.get_sandbox(VM)
    assert info is not None and info.status is SandboxStatus.RUNNING
    assert boots(fake) == ["create_sandbox", "create_sandbox"]
    assert RETRY_NOTE.format("agent relay wait_ready failed") in messages(app)
    recorded = app.state.load(SLUG).home_volume
    assert recorded is not None and list(fake.volumes) == [recorded]


def test_a_vm_that_fails_twice_leaves_neither_vm_nor_the_home_volume_made_for_it(
    app: App, fake: FakeRuntime
) -> None:
    fake.boot_failures = ["failed to start", "failed to start again"]
    with pytest.raises(VmDidNotBoot, match="failed to start again"):
        prepare(app)
    assert boots(fake) == ["create_sandbox", "create_sandbox"]
    assert fake.sandboxes == {}
    assert fake.volumes == {}
    assert app.state.load(SLUG).home_volume is None
    prepare(app)  # the next run starts from a clean slate
    assert fake.get_sandbox(VM) is not None


def test_a_failed_boot_keeps_the_home_volume_that_existed_before(app: App, fake: FakeRuntime) -> None:
    prepare(app)
    home = app.state.load(SLUG).home_volume
    assert home is not None
    fake.remove_sandbox(VM)  # as `stop -f` leaves it: the home volume stays, the VM is made anew
    fake.boot_failures = ["failed to start", "failed to start"]
    with pytest.raises(VmDidNotBoot):
        prepare(app)
    assert fake.sandboxes == {}
    assert list(fake.volumes) == [home]
    assert app.state.load(SLUG).home_volume == home


def test_a_stopped_vm_that_does_not_start_is_tried_once_more_and_kept(app: App, fake: FakeRuntime) -> None:
    prepare(app)
    home = app.state.load(SLUG).home_volume
    fake.stop_sandbox(VM)
    fake.calls.clear()
    fake.boot_failures = ["failed to start", "failed to start"]
    with pytest.raises(VmDidNotBoot):
        prepare(app)
    assert boots(fake) == ["start_sandbox", "start_sandbox"]
    info = fake.get_sandbox(VM)
    assert info is not None and info.status is SandboxStatus.STOPPED
    assert list(fake.volumes) == [home]


def test_a_boot_that_another_attempt_cannot_help_is_not_repeated(
    app: App, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = ReadyImage(runner_image(SLUG, "5ca1ab1e"), "sha256:" + "0" * 64, {}, None, built=False)
    fake.add_docker_image(missing.reference)
    monkeypatch.setattr(run, "ensure_image", lambda app, rebuild, upgrade_to, agent_upgrade_to=None: missing)
    monkeypatch.setattr(vm_step, "runnable", lambda runtime, console, image: image)  # said loaded, yet
    fake.images.pop(missing.reference)  # in the engine, not runnable by the runtime
    with pytest.raises(BootFailed) as raised:
        prepare(app)
    assert not isinstance(raised.value, VmDidNotBoot)
    assert boots(fake) == ["create_sandbox"]
    assert "trying once more" not in messages(app)
    assert fake.sandboxes == {} and fake.volumes == {}


class LeavesRecords(FakeRuntime):
    """A runtime whose failed boots leave the sandbox's record behind, as a crashed one."""

    def create_sandbox(self, spec: SandboxSpec, *, secret_values: Mapping[str, str] | None = None) -> SandboxInfo:
        failures, self.boot_failures = self.boot_failures, []
        info = super().create_sandbox(spec, secret_values=secret_values)
        self.boot_failures = failures
        if not failures:
            return info
        self.crash(spec.name)
        cause = failures.pop(0)
        raise VmDidNotBoot(f"cannot start {spec.name}: {cause}", hint="-", cause=cause)


def test_a_record_left_by_a_failed_boot_is_removed_before_and_after_the_second_attempt(tmp_path: Path) -> None:
    runtime = LeavesRecords()
    runtime.add_docker_image(IMAGE)
    console = Console(LogLevel.INFO, stream=io.StringIO())
    spec = SandboxSpec(VM, IMAGE, 1, 512, labels=managed_labels(SLUG))
    try:
        runtime.boot_failures = ["relay timeout"]
        vm_boot.create(runtime, console, spec)
        info = runtime.get_sandbox(VM)
        assert info is not None and info.status is SandboxStatus.RUNNING
        runtime.remove_sandbox(VM)
        runtime.boot_failures = ["relay timeout", "relay timeout"]
        with pytest.raises(VmDidNotBoot):
            vm_boot.create(runtime, console, spec)
        assert runtime.sandboxes == {}
    finally:
        runtime.close()
