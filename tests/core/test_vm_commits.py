"""Which of the VM's commits the host holds: the judgment on plain values."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.vm_commits import (
    ABSENT,
    EXECUTABLE,
    GITLINK,
    LOOK,
    REASON_LIMIT,
    REGULAR,
    SHOWN_REASONS,
    HeldBranch,
    TreeChange,
    capped,
    held_from_mapping,
    held_line,
    held_reasons,
    parse_diff_tree,
    runs_on_host,
    summary,
)

BLOB = "e" * 40
ZERO = "0" * 40


def change(path: str, old: str = REGULAR, new: str = REGULAR) -> TreeChange:
    return TreeChange(path, old, new, ZERO if new == ABSENT else BLOB)


def test_diff_tree_output_is_read_with_any_bytes_in_a_path() -> None:
    raw = (f":000000 160000 {ZERO} {BLOB} A\0sub\0".encode()
           + f":100644 100755 {BLOB} {BLOB} M\0dir/with space\n\x1b[31m\0".encode()
           + f":100644 000000 {BLOB} {ZERO} D\0".encode() + b"caf\xe9\0")
    assert parse_diff_tree(raw) == [
        TreeChange("sub", ABSENT, GITLINK, BLOB, ZERO),
        TreeChange("dir/with space\n\x1b[31m", REGULAR, EXECUTABLE, BLOB, BLOB),
        TreeChange("caf\udce9", REGULAR, ABSENT, ZERO, BLOB),
    ]
    assert parse_diff_tree(b"") == []
    with pytest.raises(ValueError, match="not a line of git diff-tree"):
        parse_diff_tree(b"garbage\0path\0")


@pytest.mark.parametrize(("path", "old", "new"), [
    ("sub", ABSENT, GITLINK),
    ("vendor/lib", GITLINK, GITLINK),
    ("was-a-module", GITLINK, ABSENT),
    ("now-a-file", GITLINK, REGULAR),
])
def test_any_gitlink_change_is_held(path: str, old: str, new: str) -> None:
    reasons = held_reasons([change(path, old, new)], ())
    assert reasons == [f"a gitlink (submodule) at {path}"]


@pytest.mark.parametrize("path", [".gitmodules", "deep/er/.gitmodules"])
def test_submodule_settings_anywhere_are_held(path: str) -> None:
    assert held_reasons([change(path)], ()) == [f"{path} (submodule settings)"]


@pytest.mark.parametrize("path", [".opencode-sandbox/config.yaml", ".opencode-sandbox/Dockerfile"])
def test_the_tools_own_folder_is_held(path: str) -> None:
    assert held_reasons([change(path)], ()) == [f"{path} (this tool's configuration)"]


def test_a_file_the_host_runs_is_held_at_the_top_and_below_for_the_default_names_only() -> None:
    guarded = (".envrc", ".husky", "Makefile")
    assert runs_on_host(".envrc", guarded)
    assert runs_on_host(".husky/pre-commit", guarded)
    assert runs_on_host("Makefile", guarded)
    assert runs_on_host("packages/web/.envrc", guarded), "a default name counts in every folder"
    assert runs_on_host("packages/web/.claude/settings.json", guarded)
    assert runs_on_host("packages/web/.opencode-sandbox/config.yaml", guarded)
    assert not runs_on_host("packages/web/Makefile", guarded), "a name of the user's own counts from the top"
    assert not runs_on_host(".envrc.example", guarded) and not runs_on_host("src/envrc", guarded)
    assert not runs_on_host(".huskyrc", guarded)
    assert held_reasons([change("packages/web/.envrc")], guarded) == ["packages/web/.envrc (a file the host runs)"]


def test_ordinary_changes_pass_and_every_reason_is_named() -> None:
    ordinary = [change("src/main.py"), change("README.md", REGULAR, EXECUTABLE), change("old.txt", REGULAR, ABSENT)]
    assert held_reasons(ordinary, (".envrc",)) == []
    mixed = [*ordinary, change("sub", ABSENT, GITLINK), change(".envrc")]
    assert held_reasons(mixed, (".envrc",)) == ["a gitlink (submodule) at sub", ".envrc (a file the host runs)"]


def test_a_path_the_vm_named_is_shown_escaped() -> None:
    assert held_reasons([change("x\x1b]52;c;ZXZpbA==\x07", ABSENT, GITLINK)], ()) == [
        "a gitlink (submodule) at x\\x1b]52;c;ZXZpbA==\\x07"]


def test_the_summary_names_a_few_and_counts_the_rest() -> None:
    reasons = [f"r{index}" for index in range(SHOWN_REASONS + 3)]
    assert summary(reasons) == ", ".join(reasons[:SHOWN_REASONS]) + " and 3 more"
    assert summary(["one"]) == "one"


def test_a_held_branch_reads_back_and_its_line_says_how_to_look_and_take() -> None:
    held = HeldBranch("a" * 40, "b" * 40, ("a gitlink (submodule) at sub",))
    assert held_from_mapping({"commit": held.commit, "base": held.base, "reasons": list(held.reasons)}) == held
    with pytest.raises(ValueError):
        held_from_mapping({"commit": 1})
    line = held_line("main", held)
    assert line.startswith("main: held, the VM's commit aaaaaaaaaaaa changes a gitlink (submodule) at sub")
    assert f"`{LOOK} bbbbbbbbbbbb aaaaaaaaaaaa`" in line and "`git merge aaaaaaaaaaaa`" in line


def test_the_branch_cap_keeps_the_checked_out_branch_first() -> None:
    heads = {f"refs/heads/b{index:03d}": str(index) for index in range(10)}
    kept, left_out = capped(heads, ["refs/heads/b009"], 3)
    assert list(kept) == ["refs/heads/b009", "refs/heads/b000", "refs/heads/b001"] and left_out == 7
    assert capped(heads, ["refs/heads/gone"], 100) == (heads, 0)


@pytest.mark.parametrize(("path", "why"), [
    (".Envrc", "a file the host runs"),
    ("web/.CLAUDE/settings.json", "a file the host runs"),
    (".GITMODULES", "submodule settings"),
    (".OpenCode-Sandbox/config.yaml", "this tool's configuration"),
])
def test_names_are_held_whatever_their_case(path: str, why: str) -> None:
    """A checkout whose file system ignores case (macOS, a casefolded folder) runs `.Envrc` as the
    `.envrc` direnv looks for."""
    assert held_reasons([change(path)], (".envrc",)) == [f"{path} ({why})"]


def test_reasons_stop_at_their_limit() -> None:
    many = [change(f"m{index}", ABSENT, GITLINK) for index in range(REASON_LIMIT * 5)]
    assert len(held_reasons(many, ())) == REASON_LIMIT


def test_a_combined_diff_of_a_merge_is_read_with_its_parents() -> None:
    raw = (f"{'c' * 40}\0".encode()
           + f"::100644 100644 160000 {BLOB} {BLOB} {BLOB} MM\0evil\0".encode()
           + f":000000 100644 {ZERO} {BLOB} A\0plain\0".encode())
    assert parse_diff_tree(raw) == [TreeChange("evil", REGULAR, GITLINK, BLOB, BLOB),
                                    TreeChange("plain", ABSENT, REGULAR, BLOB, ZERO)]
