from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from opencode_sandbox import project as project_module
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


def _git_answer(folder: Path) -> tuple[Path, Path] | None:
    probe = subprocess.run(
        ["git", "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir"],
        cwd=folder, capture_output=True, text=True, check=False,
    )
    if probe.returncode != 0:
        return None
    top, common = probe.stdout.splitlines()
    return Path(top), Path(common).resolve()


def _layouts(tmp_path: Path, origin: Path) -> list[Path]:
    clone = tmp_path / "clone with space"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    nested = clone / "a" / "b"
    nested.mkdir(parents=True)
    worktree = tmp_path / "linked"
    git(clone, "worktree", "add", "-q", "-b", "linked", str(worktree))
    plain = tmp_path / "plain"
    plain.mkdir()
    return [origin, clone, nested, worktree, plain]


def test_the_repository_is_found_without_git_where_git_finds_it(
    tmp_path: Path, origin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folders = _layouts(tmp_path, origin)
    expected = {folder: _git_answer(folder) for folder in folders}
    monkeypatch.setattr(project_module, "_git", _no_git_allowed)
    for folder in folders:
        project = resolve_project(folder)
        answer = expected[folder]
        assert project.is_git == (answer is not None), folder
        assert project.root == (answer[0] if answer else folder), folder


def _no_git_allowed(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"git was run in {cwd}: {args}")


def test_an_unusual_layout_is_left_to_git(tmp_path: Path, origin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("GIT_DIR", str(origin / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(origin))
    asked: list[tuple[str, ...]] = []
    real_git = project_module._git

    def counting_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        asked.append(args)
        return real_git(cwd, *args)

    monkeypatch.setattr(project_module, "_git", counting_git)
    project = resolve_project(elsewhere)
    assert asked and asked[0][0] == "rev-parse"
    assert project.is_git and project.root == origin


def test_a_submodule_resolves_like_git_says(tmp_path: Path, origin: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(origin), "sub")
    expected = _git_answer(clone / "sub")
    project = resolve_project(clone / "sub")
    assert expected is not None and project.root == expected[0] == clone / "sub"
    assert project.slug == slug_for_remote(str(origin))


def test_inside_the_git_folder_git_decides(origin: Path) -> None:
    project = resolve_project(origin / ".git" / "refs")
    assert not project.is_git
    assert project.root == origin / ".git" / "refs"


def test_a_core_worktree_setting_is_left_to_git(tmp_path: Path, origin: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    git(origin, "config", "core.worktree", str(work))
    expected = _git_answer(origin)
    assert expected is not None and expected[0] == work
    project = resolve_project(origin)
    assert project.is_git and project.root == work
