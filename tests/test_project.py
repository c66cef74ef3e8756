from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.core.slug import slug_for_path, slug_for_remote
from opencode_sandbox.project import resolve_project


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    (source / "README").write_text("hi\n")
    git(source, "add", ".")
    git(source, "commit", "-q", "-m", "init")
    return source


def test_clones_of_one_remote_share_the_slug(tmp_path: Path, origin: Path) -> None:
    remote = "git@github.com:inoio/myproject.git"
    slugs = set()
    for index, url in enumerate((remote, "https://github.com/inoio/myproject")):
        clone = tmp_path / f"clone {index} ünï"
        git(tmp_path, "clone", "-q", str(origin), str(clone))
        git(clone, "remote", "set-url", "origin", url)
        nested = clone / "deep" / "folder"
        nested.mkdir(parents=True)
        project = resolve_project(nested)
        assert project.root == clone
        assert project.is_git
        slugs.add(project.slug)
    assert slugs == {slug_for_remote(remote)}


def test_linked_worktree_shares_the_slug(tmp_path: Path, origin: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "remote", "set-url", "origin", "git@example.org:team/app.git")
    worktree = tmp_path / "wt"
    git(clone, "worktree", "add", "-q", "-b", "feature", str(worktree))
    main, linked = resolve_project(clone), resolve_project(worktree)
    assert main.slug == linked.slug == slug_for_remote("git@example.org:team/app.git")
    assert linked.root == worktree


def test_repository_without_remote_hashes_its_main_folder(tmp_path: Path, origin: Path) -> None:
    worktree = tmp_path / "wt-no-remote"
    git(origin, "worktree", "add", "-q", "-b", "side", str(worktree))
    main, linked = resolve_project(origin), resolve_project(worktree)
    assert main.remote is None
    assert main.slug == linked.slug == slug_for_path(str(origin))


def test_origin_is_preferred_over_other_remotes(tmp_path: Path, origin: Path) -> None:
    git(origin, "remote", "add", "aaa", "git@example.org:x/first.git")
    git(origin, "remote", "add", "origin", "git@example.org:x/chosen.git")
    assert resolve_project(origin).slug == slug_for_remote("git@example.org:x/chosen.git")


def test_plain_folder(tmp_path: Path) -> None:
    folder = tmp_path / "plain folder"
    folder.mkdir()
    project = resolve_project(folder)
    assert not project.is_git
    assert project.root == folder
    assert project.slug == slug_for_path(str(folder))


def test_odd_remote_characters(tmp_path: Path, origin: Path) -> None:
    git(origin, "remote", "add", "origin", "https://host.example/grp/Wéird Repo (v2)!.git")
    project = resolve_project(origin)
    assert project.slug.startswith("w-ird-repo-v2-")


def test_remote_from_an_included_config_file(tmp_path: Path, origin: Path) -> None:
    extra = tmp_path / "extra.gitconfig"
    extra.write_text('[remote "origin"]\n\turl = git@example.org:inc/included.git\n')
    git(origin, "config", "include.path", str(extra))
    assert resolve_project(origin).slug == slug_for_remote("git@example.org:inc/included.git")


def test_remote_with_a_trailing_comment_is_read_like_git_does(origin: Path) -> None:
    config = origin / ".git" / "config"
    config.write_text(config.read_text() + '[remote "origin"]\n\turl = git@example.org:c/commented.git ; note\n')
    assert resolve_project(origin).slug == slug_for_remote("git@example.org:c/commented.git")
