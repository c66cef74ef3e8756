"""Reading provisioning sources: regular files only, no link followed where the VM could have put one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from opencode_sandbox.services.provisioning import ProvisionSource, collect_files, default_sources
from opencode_sandbox.services.regular_files import read_tree


def test_a_tree_gives_its_regular_files_with_mode_and_skips_everything_else(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host only")
    top = tmp_path / "top"
    (top / "agent").mkdir(parents=True)
    (top / "agent" / "review.md").write_text("review")
    (top / "run.sh").write_text("#!/bin/sh\n")
    (top / "run.sh").chmod(0o755)
    (top / "link-to-file").symlink_to(outside / "secret")
    (top / "link-to-folder").symlink_to(outside, target_is_directory=True)
    (top / "environ").symlink_to("/proc/self/environ")
    os.mkfifo(top / "pipe")

    tree = read_tree(top)

    assert {path: content.data for path, content in tree.files.items()} == {
        "agent/review.md": b"review", "run.sh": b"#!/bin/sh\n"}
    assert tree.files["run.sh"].mode == 0o755
    assert sorted(tree.skipped) == ["environ", "link-to-file", "link-to-folder", "pipe"]


def test_the_user_s_own_top_may_be_a_link_but_not_one_in_the_checkout(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "opencode.json").write_text("{}")
    config = tmp_path / "config"
    config.symlink_to(dotfiles, target_is_directory=True)
    assert set(read_tree(config).files) == {"opencode.json"}

    checkout = tmp_path / "checkout"
    (checkout / ".opencode-sandbox").mkdir(parents=True)
    (checkout / ".opencode-sandbox" / "opencode").symlink_to(dotfiles, target_is_directory=True)
    refused = read_tree(checkout / ".opencode-sandbox" / "opencode", within=checkout)
    assert refused.files == {} and refused.skipped == [""]


def test_a_link_in_place_of_the_checkout_s_settings_folder_leads_nowhere(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "opencode").mkdir(parents=True)
    (elsewhere / "opencode" / "secret").write_text("host only")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".opencode-sandbox").symlink_to(elsewhere, target_is_directory=True)
    assert read_tree(checkout / ".opencode-sandbox" / "opencode", within=checkout).files == {}


def test_a_file_top_is_read_and_a_missing_one_is_nothing(tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text('{"a": 1}')
    (tmp_path / "auth.json").chmod(0o600)
    tree = read_tree(tmp_path / "auth.json")
    assert tree.files[""].data == b'{"a": 1}' and tree.files[""].mode == 0o600
    assert read_tree(tmp_path / "missing.json").files == {}
    assert read_tree(tmp_path / "missing" / "deeper", within=tmp_path).files == {}


def test_collecting_merges_the_checkout_on_top_and_names_what_it_skipped(tmp_path: Path) -> None:
    home, checkout = tmp_path / "home", tmp_path / "checkout"
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text("user")
    (checkout / ".opencode-sandbox" / "opencode").mkdir(parents=True)
    (checkout / ".opencode-sandbox" / "opencode" / "opencode.json").write_text("project")
    (checkout / ".opencode-sandbox" / "opencode" / "env").symlink_to("/proc/self/environ")
    sources = default_sources(home, home / ".config", home / ".local" / "share", checkout)

    collected = collect_files(sources)

    assert collected.files[".config/opencode/opencode.json"].data == b"project"
    assert collected.skipped == [checkout / ".opencode-sandbox" / "opencode" / "env"]


@pytest.mark.timeout(20)
def test_a_file_swapped_for_a_fifo_or_a_link_while_read_is_skipped_not_waited_on(tmp_path: Path) -> None:
    """The checkout changes under the reader (the VM runs beside it): what is opened is checked."""
    top = tmp_path / "top"
    top.mkdir()
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            for make in (lambda path: path.write_text("plain"), lambda path: os.mkfifo(path),
                         lambda path: path.symlink_to("/proc/self/environ")):
                try:
                    (top / "changing").unlink(missing_ok=True)
                    make(top / "changing")
                except OSError:
                    pass

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for _ in range(300):
            tree = read_tree(top)
            # Empty when caught between the file's creation and its write.
            assert all(content.data in (b"", b"plain") for content in tree.files.values()), tree
    finally:
        stop.set()
        swapper.join()


def test_a_source_within_the_checkout_is_declared_so(tmp_path: Path) -> None:
    sources = default_sources(tmp_path, tmp_path / "c", tmp_path / "d", tmp_path / "checkout")
    assert [source.within for source in sources] == [None, None, None, tmp_path / "checkout"]
    assert isinstance(sources[0], ProvisionSource)


def test_what_this_user_cannot_read_is_skipped_not_fatal(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    top = tmp_path / "top"
    (top / "closed").mkdir(parents=True)
    (top / "secret.json").write_text("{}")
    (top / "secret.json").chmod(0)
    (top / "closed").chmod(0)
    (top / "open.json").write_text("{}")
    try:
        tree = read_tree(top)
    finally:
        (top / "closed").chmod(0o755)
    assert set(tree.files) == {"open.json"} and sorted(tree.skipped) == ["closed", "secret.json"]
