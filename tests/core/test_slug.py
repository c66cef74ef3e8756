from __future__ import annotations

import hashlib
import re

import pytest

from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.naming import MAX_NAME_LENGTH, home_volume_name, vm_name
from opencode_sandbox.core.slug import (
    base36_hash,
    name_part,
    normalize_remote,
    slug_for_path,
    slug_for_remote,
)

SAME_PROJECT = [
    "git@github.com:inoio/myproject.git",
    "https://github.com/inoio/myproject",
    "https://github.com/inoio/myproject.git",
    "ssh://git@github.com/inoio/myproject.git",
    "ssh://git@github.com:22/inoio/myproject.git",
    "https://user:token@github.com/inoio/myproject/",
    "git://github.com/inoio/myproject.git",
    "GitHub.com:inoio/myproject",
]


@pytest.mark.parametrize("url", SAME_PROJECT)
def test_remote_forms_normalize_to_host_and_path(url: str) -> None:
    assert normalize_remote(url) == "github.com:inoio/myproject"


def test_all_forms_of_one_remote_share_the_slug() -> None:
    slugs = {slug_for_remote(url) for url in SAME_PROJECT}
    assert slugs == {"myproject-" + base36_hash("github.com:inoio/myproject")}


def test_slug_shape() -> None:
    slug = slug_for_remote("git@github.com:inoio/myproject.git")
    assert re.fullmatch(r"myproject-[0-9a-z]{14}", slug)


def test_hash_is_base36_sha256_14_chars() -> None:
    value = base36_hash("github.com:inoio/myproject")
    assert len(value) == 14
    assert set(value) <= set("0123456789abcdefghijklmnopqrstuvwxyz")
    assert value != base36_hash("github.com:inoio/otherproject")


def test_hash_is_the_spec_computation_over_hashlib_sha256() -> None:
    text = "github.com:inoio/myproject"
    number = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big") % 36**14
    expected = ""
    for _ in range(14):
        number, digit = divmod(number, 36)
        expected = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + expected
    assert base36_hash(text) == expected
    for data in (b"", b"abc", bytes(range(256)) * 100):
        assert sha256(data).digest() == hashlib.sha256(data).digest()


def test_different_hosts_or_paths_differ() -> None:
    assert slug_for_remote("git@github.com:a/x.git") != slug_for_remote("git@gitlab.com:a/x.git")
    assert slug_for_remote("git@github.com:a/x.git") != slug_for_remote("git@github.com:b/x.git")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("MyProject", "myproject"),
        ("my_project.v2", "my-project-v2"),
        ("--weird__name!!", "weird-name"),
        ("a" * 40, "a" * 20),
        ("abcdefghijklmnopqrs-tuvw", "abcdefghijklmnopqrs"),
        ("ünïcödé", "n-c-d"),
        ("!!!", "project"),
        ("", "project"),
    ],
)
def test_name_part(raw: str, expected: str) -> None:
    assert name_part(raw) == expected


@pytest.mark.parametrize(
    "url",
    [
        "git@host.example:group/sub group/My Repo (old).git",
        "https://host.example/ünï/çødé.git",
        "file:///srv/git/project.git",
        "/srv/git/project.git",
        "../relative/repo",
        "https://host.example/" + "x" * 300 + ".git",
    ],
)
def test_odd_remotes_give_valid_bounded_names(url: str) -> None:
    slug = slug_for_remote(url)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*-[0-9a-z]{14}", slug)
    assert len(vm_name(slug)) <= MAX_NAME_LENGTH
    assert len(home_volume_name(slug)) <= MAX_NAME_LENGTH
    assert len(vm_name(slug)) <= 55


def test_local_path_remotes_keep_their_path() -> None:
    assert normalize_remote("/srv/git/project.git") == ":srv/git/project"
    assert normalize_remote("file:///srv/git/project.git") == ":srv/git/project"


def test_slug_for_path_uses_folder_name() -> None:
    assert slug_for_path("/home/me/Code/Some Thing").startswith("some-thing-")


def test_without_the_builtin_module_hashlib_gives_the_same_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from opencode_sandbox.core import digest

    def missing(name: str) -> object:
        raise ImportError(name)

    digest._constructor.cache_clear()
    monkeypatch.setattr(importlib, "import_module", missing)
    try:
        assert digest._constructor() is hashlib.sha256
        assert digest.sha256(b"abc").hexdigest() == hashlib.sha256(b"abc").hexdigest()
    finally:
        digest._constructor.cache_clear()
