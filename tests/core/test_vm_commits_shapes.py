"""Which of the VM's changes hold its branch, for shapes an attack on the isolated mode found."""

from __future__ import annotations

from opencode_sandbox.core.guard import DEFAULT_GUARDED
from opencode_sandbox.core.vm_commits import TreeChange, held_reasons, runs_on_host

ZERO = "0" * 40


def change(path: str, new_mode: str = "100644") -> TreeChange:
    return TreeChange(path, "000000", new_mode, "1" * 40, ZERO)


def test_a_head_file_below_the_top_holds_the_branch() -> None:
    assert held_reasons([change("src/HEAD"), change("src/config")], DEFAULT_GUARDED)
    assert held_reasons([change("lib/Head")], DEFAULT_GUARDED)
    assert not held_reasons([change("src/header.h")], DEFAULT_GUARDED)


def test_a_folder_of_a_guarded_path_made_a_link_runs_on_the_host() -> None:
    assert runs_on_host(".cargo", DEFAULT_GUARDED), "a link named .cargo puts .cargo/config.toml elsewhere"
    assert held_reasons([change(".cargo", "120000")], DEFAULT_GUARDED)
    assert not runs_on_host("cargo", DEFAULT_GUARDED)
