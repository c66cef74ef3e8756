"""Mount entries as written in the `mounts` setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.core.host_mounts import HostMount, parse_mount, parse_mounts


@pytest.mark.parametrize(("entry", "expected"), [
    ("/srv/lib:/mnt/lib", HostMount(Path("/srv/lib"), "/mnt/lib", True, "/srv/lib:/mnt/lib")),
    ("/srv/lib:/mnt/lib:ro", HostMount(Path("/srv/lib"), "/mnt/lib", True, "/srv/lib:/mnt/lib:ro")),
    ("/srv/out:/mnt/out:rw", HostMount(Path("/srv/out"), "/mnt/out", False, "/srv/out:/mnt/out:rw")),
    ("data:/data/./set/", HostMount(Path("data"), "/data/set", True, "data:/data/./set/")),
    (" /a:/opt/a ", HostMount(Path("/a"), "/opt/a", True, "/a:/opt/a")),
])
def test_entries_are_read_as_docker_writes_them(entry: str, expected: HostMount) -> None:
    assert parse_mount(entry) == expected


def test_a_home_folder_is_expanded_and_a_relative_one_kept_for_the_loader() -> None:
    assert parse_mount("~/.gitconfig:/mnt/gitconfig").source == Path.home() / ".gitconfig"
    relative = parse_mount("shared/lib:/mnt/lib")
    assert relative.source == Path("shared/lib")
    assert relative.relative_to(Path("/conf")).source == Path("/conf/shared/lib")
    assert parse_mount("/abs:/mnt/x").relative_to(Path("/conf")).source == Path("/abs")


@pytest.mark.parametrize(("entry", "reason"), [
    ("/srv:/workspace", "/workspace is the tool's own"),
    ("/srv:/workspace/sub", "/workspace is the tool's own"),
    ("/srv:/home/dev/.ssh", "/home/dev is the tool's own"),
    ("/srv:/tmp", "/tmp is the tool's own"),
    ("/srv:/mnt/../tmp/x", "/tmp is the tool's own"),
    ("/srv:/etc", "/etc is a system folder"),
    ("/srv:/usr/local/lib", "/usr is a system folder"),
    ("/srv:/lib64", "/lib64 is a system folder"),
    ("/srv:/proc", "/proc is a system folder"),
    ("/srv:/var/lib/x", "/var is a system folder"),
    ("/srv:/root", "/root is a system folder"),
    ("/srv:/", "/ holds /workspace, which a mount there would hide"),
    ("/srv://", "/ holds /workspace, which a mount there would hide"),
    ("/srv:/home", "/home holds /home/dev, which a mount there would hide"),
])
def test_the_tool_s_own_and_system_folders_are_refused_as_targets(entry: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_mount(entry)
    assert str(caught.value).startswith(f"'{entry}': {reason}")


@pytest.mark.parametrize(("entry", "message"), [
    ("/srv", "is not a mount"),
    ("/srv:/mnt/x:rx", "is not a mount"),
    ("/srv:/mnt/x:ro:rw", "is not a mount"),
    (":/mnt/x", "is not a mount"),
    ("/srv:", "is not a mount"),
    ("/srv:mnt/x", "the guest path 'mnt/x' must be absolute"),
    ("/a,b:/mnt/x", "a path with a comma cannot be mounted"),
    ("", "is not a mount"),
])
def test_malformed_entries_say_what_is_wrong(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_mount(entry)


def test_two_mounts_on_one_target_are_refused() -> None:
    with pytest.raises(ValueError) as caught:
        parse_mounts(["/a:/mnt/x", "/b:/mnt/y", "/c:/mnt/x/:rw"])
    assert str(caught.value) == "'/a:/mnt/x' and '/c:/mnt/x/:rw' both mount on /mnt/x; give each its own guest path"


def test_a_list_or_one_entry_per_semicolon() -> None:
    assert [mount.target for mount in parse_mounts("/a:/mnt/a;/b:/mnt/b:rw")] == ["/mnt/a", "/mnt/b"]
    assert parse_mounts([]) == ()
    with pytest.raises(ValueError, match="expected a list of mounts"):
        parse_mounts({"a": "b"})
