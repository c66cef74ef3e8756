"""`volume reset|migrate|edit` with the fake runtime: order, refusals, and what a failure leaves."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, slug_of_home_volume, vm_name
from opencode_sandbox.errors import NotFound, SandboxError, UsageError
from opencode_sandbox.runtime.types import ExecResult, MountKind, RuntimeKind, SandboxStatus
from opencode_sandbox.services.volumes import VolumeAction, change_volume, plan_change
from opencode_sandbox.state.store import ProjectState
from tests.fakes.runtime import ExecCall, FakeNode, FakeRuntime
from tests.services.app_fakes import SLUG, make_app, messages, plant_project, results_into

OLD = datetime.now(UTC) - timedelta(days=3)


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    yield runtime
    runtime.close()


def project(fake: FakeRuntime, tmp_path: Path, status: SandboxStatus = SandboxStatus.STOPPED) -> tuple[str, str]:
    """A project with a VM, a home volume holding a user file, and its state file."""
    volume, image = plant_project(fake, SLUG, volume_time=OLD, status=status)
    fake.volumes[volume].files["notes.txt"] = FakeNode("file", "dev", 0o600, "my notes\n")
    fake.volumes[volume].files[".profile"] = FakeNode("file", "dev", 0o644, "# edited by the user\n")
    make_app(fake, tmp_path).state.save(SLUG, ProjectState(home_volume=volume, image_reference=image))
    return volume, image


def new_volume_of(fake: FakeRuntime, old: str) -> str:
    (name,) = [name for name in fake.volumes if name != old and slug_of_home_volume(name) == SLUG]
    return name


def test_reset_makes_a_fresh_volume_from_the_image_and_records_it(fake: FakeRuntime, tmp_path: Path) -> None:
    old, _ = project(fake, tmp_path)
    app = make_app(fake, tmp_path)
    lines: list[str] = []
    change = change_volume(results_into(app, lines), VolumeAction.RESET, None, remove_old=False, dry_run=False)
    new = new_volume_of(fake, old)
    assert change.new == new and change.old == old
    assert fake.volumes[new].files[".profile"].data == "# profile\n"
    assert "notes.txt" not in fake.volumes[new].files
    assert fake.volumes[new].labels["org.opencode-sandbox.slug"] == SLUG
    assert app.state.load(SLUG).home_volume == new
    assert old in fake.volumes  # kept without --rm
    assert vm_name(SLUG) not in fake.sandboxes  # the stopped VM mounted the old volume
    assert lines == [f"{new} is now the home volume of project {SLUG}"]
    order = [op for op, _ in fake.calls if op in ("create_volume", "fill_volume_from_image", "remove_sandbox")]
    assert order[-3:] == ["create_volume", "fill_volume_from_image", "remove_sandbox"]


def test_migrate_copies_the_old_files_on_top_and_rm_removes_the_old_volume(fake: FakeRuntime,
                                                                             tmp_path: Path) -> None:
    old, _ = project(fake, tmp_path)
    app = make_app(fake, tmp_path)
    change_volume(app, VolumeAction.MIGRATE, None, remove_old=True, dry_run=False)
    new = new_volume_of(fake, old)
    files = fake.volumes[new].files
    assert files["notes.txt"].data == "my notes\n" and files["notes.txt"].mode == 0o600
    assert files[".profile"].data == "# edited by the user\n"
    assert old not in fake.volumes
    assert app.state.load(SLUG).home_volume == new
    operations = [op for op, _ in fake.calls]
    assert operations.index("copy_volume") < operations.index("remove_volume")


def test_a_running_vm_refuses_every_change(fake: FakeRuntime, tmp_path: Path) -> None:
    old, _ = project(fake, tmp_path, status=SandboxStatus.RUNNING)
    app = make_app(fake, tmp_path)
    for action in VolumeAction:
        with pytest.raises(SandboxError, match="is running") as raised:
            change_volume(app, action, None, remove_old=True, dry_run=False)
        assert "opencode-sandbox stop" in (raised.value.hint or "")
    assert set(fake.volumes) == {old}
    assert app.state.load(SLUG).home_volume == old


def test_dry_run_says_what_would_happen_and_changes_nothing(fake: FakeRuntime, tmp_path: Path) -> None:
    old, image = project(fake, tmp_path)
    app = make_app(fake, tmp_path)
    lines: list[str] = []
    change = change_volume(results_into(app, lines), VolumeAction.MIGRATE, None, remove_old=True, dry_run=True)
    assert lines == [
        f"dry-run: would create {change.new} from the /home/dev of {image}",
        f"dry-run: would copy every file of {old} on top of it",
        f"dry-run: would record {change.new} as the home volume of project {SLUG}",
        f"dry-run: would remove the stopped VM {vm_name(SLUG)} (the next run recreates it on the new volume)",
        f"dry-run: would remove {old}",
    ]
    assert set(fake.volumes) == {old} and vm_name(SLUG) in fake.sandboxes
    assert app.state.load(SLUG).home_volume == old


@pytest.mark.parametrize("failure", [SandboxError("disk full", hint="-"), KeyboardInterrupt()])
def test_a_failed_copy_removes_the_new_volume_and_keeps_the_old_one(
    fake: FakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    old, _ = project(fake, tmp_path)
    app = make_app(fake, tmp_path)

    def broken_copy(source: str, target: str) -> None:
        fake.volumes[target].files["half"] = FakeNode("file", "dev", 0o644, "half-copied")
        raise failure

    monkeypatch.setattr(fake, "copy_volume", broken_copy)
    with pytest.raises(type(failure)):
        change_volume(app, VolumeAction.MIGRATE, None, remove_old=True, dry_run=False)
    assert set(fake.volumes) == {old}
    assert fake.volumes[old].files["notes.txt"].data == "my notes\n"
    assert app.state.load(SLUG).home_volume == old
    assert vm_name(SLUG) in fake.sandboxes


def test_without_a_home_volume_or_an_image_it_says_what_to_run(fake: FakeRuntime, tmp_path: Path) -> None:
    app = make_app(fake, tmp_path)
    with pytest.raises(SandboxError, match="no home volume yet") as raised:
        change_volume(app, VolumeAction.RESET, None, remove_old=False, dry_run=True)
    assert "opencode-sandbox" in (raised.value.hint or "")
    volume = home_volume_name(SLUG, OLD)
    fake.create_volume(volume, managed_labels(SLUG))
    app.state.save(SLUG, ProjectState(home_volume=volume))
    with pytest.raises(SandboxError, match="no runner image is recorded") as raised:
        change_volume(app, VolumeAction.RESET, None, remove_old=False, dry_run=True)
    assert "opencode-sandbox build" in (raised.value.hint or "")


def test_a_named_volume_must_exist_and_be_a_home_volume(fake: FakeRuntime, tmp_path: Path) -> None:
    project(fake, tmp_path)
    app = make_app(fake, tmp_path)
    with pytest.raises(UsageError, match="not a home volume name"):
        change_volume(app, VolumeAction.RESET, "my-data", remove_old=False, dry_run=True)
    with pytest.raises(NotFound):
        change_volume(app, VolumeAction.RESET, home_volume_name(SLUG, OLD - timedelta(days=1)), remove_old=False,
                      dry_run=True)


def test_a_named_older_volume_is_migrated_into_a_new_current_one(fake: FakeRuntime, tmp_path: Path) -> None:
    current, _ = project(fake, tmp_path)
    older = home_volume_name(SLUG, OLD - timedelta(days=10))
    fake.create_volume(older, managed_labels(SLUG))
    fake.volumes[older].files["from-older"] = FakeNode("file", "dev", 0o644, "older\n")
    app = make_app(fake, tmp_path)
    change = change_volume(app, VolumeAction.MIGRATE, older, remove_old=False, dry_run=False)
    assert change.old == older
    assert fake.volumes[change.new].files["from-older"].data == "older\n"
    assert app.state.load(SLUG).home_volume == change.new
    assert {current, older} < set(fake.volumes)


def test_a_new_name_never_collides_with_the_old_one(fake: FakeRuntime, tmp_path: Path) -> None:
    project(fake, tmp_path)
    now = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    taken = home_volume_name(SLUG, now)
    fake.create_volume(taken, managed_labels(SLUG))
    app = make_app(fake, tmp_path)
    change = plan_change(fake, app.state, SLUG, VolumeAction.RESET, taken, remove_old=False, now=now)
    assert change.new == home_volume_name(SLUG, now + timedelta(seconds=1))


def edit_shell(fake: FakeRuntime, code: int, seen: list[ExecCall]) -> None:
    def shell(call: ExecCall) -> ExecResult:
        seen.append(call)
        sandbox = fake.sandboxes[call.sandbox]
        assert sandbox.spec is not None
        mounts = {mount.target: mount for mount in sandbox.spec.mounts}
        assert mounts["/mnt/old"].readonly and mounts["/mnt/old"].kind is MountKind.VOLUME
        old = fake.volumes[mounts["/mnt/old"].source]
        new = fake.volumes[mounts["/home/dev"].source]
        new.files["notes.txt"] = old.files["notes.txt"]  # what the user copies by hand
        return ExecResult(code, "", "")

    fake.on_exec("bash", shell)


def test_edit_keeps_the_new_volume_when_the_shell_exits_zero(fake: FakeRuntime, tmp_path: Path) -> None:
    old, _ = project(fake, tmp_path)
    seen: list[ExecCall] = []
    edit_shell(fake, 0, seen)
    app = make_app(fake, tmp_path)
    change = change_volume(app, VolumeAction.EDIT, None, remove_old=False, dry_run=False)
    assert [call.argv for call in seen] == [("bash", "-l")]
    assert seen[0].user == "dev" and seen[0].workdir == "/home/dev"
    assert fake.volumes[change.new].files["notes.txt"].data == "my notes\n"
    assert fake.volumes[change.new].files[".profile"].data == "# profile\n"
    assert app.state.load(SLUG).home_volume == change.new
    assert seen[0].sandbox not in fake.sandboxes  # the throwaway sandbox is gone
    assert old in fake.volumes


def test_edit_shows_the_image_load_a_runtime_needs_first(fake: FakeRuntime, tmp_path: Path) -> None:
    """On microsandbox the image may not be loaded yet (a `prune`, another msb home): loading it
    takes a while on a large image, and is shown as a step, as a run shows it."""
    _, image = project(fake, tmp_path)
    del fake.images[image]
    edit_shell(fake, 0, [])
    app = make_app(fake, tmp_path)
    change_volume(app, VolumeAction.EDIT, None, remove_old=False, dry_run=False)
    assert f"Loading {image} into docker..." in messages(app)
    assert ("load_image", image) in fake.calls


def test_edit_abandons_the_new_volume_when_the_shell_fails(fake: FakeRuntime, tmp_path: Path) -> None:
    old, _ = project(fake, tmp_path)
    seen: list[ExecCall] = []
    edit_shell(fake, 3, seen)
    app = make_app(fake, tmp_path)
    with pytest.raises(SandboxError, match="exited with status 3"):
        change_volume(app, VolumeAction.EDIT, None, remove_old=True, dry_run=False)
    assert set(fake.volumes) == {old}
    assert app.state.load(SLUG).home_volume == old
    assert seen[0].sandbox not in fake.sandboxes
    assert vm_name(SLUG) in fake.sandboxes


def test_a_vm_that_cannot_be_removed_only_warns(fake: FakeRuntime, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    project(fake, tmp_path)

    def refuse(name: str) -> None:
        raise SandboxError("busy", hint="-")

    monkeypatch.setattr(fake, "remove_sandbox", refuse)
    app = make_app(fake, tmp_path)
    change = change_volume(app, VolumeAction.RESET, None, remove_old=False, dry_run=False)
    assert app.state.load(SLUG).home_volume == change.new
    assert "opencode-sandbox stop -f" in messages(app)
