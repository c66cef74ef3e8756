"""The VM's git directory as plain values: what it is seeded with, which refs pass, the sync plan."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.core.vm_git import (
    HOST_OBJECTS,
    BadBundle,
    HostFacts,
    config_text,
    fast_forward_outcome,
    nothing_pending,
    parse_refs,
    plan_sync,
    read_bundle_header,
    seed_files,
    valid_ref,
    without_password,
)

ONE = "1" * 40
TWO = "2" * 40


def facts(**changes: object) -> HostFacts:
    base = HostFacts(head="ref: refs/heads/main", object_format="sha1",
                     refs={"refs/heads/main": ONE, "refs/tags/v1": TWO},
                     config=(("remote.origin.url", "https://me:s3cret@example.org/x.git"),
                             ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
                             ("branch.main.remote", "origin"), ("branch.main.merge", "refs/heads/main"),
                             ("core.fsmonitor", "touch /tmp/pwned"), ("core.hookspath", "/tmp/hooks"),
                             ("include.path", "/tmp/evil")))
    return base._replace(**changes)


def test_the_seed_shares_the_hosts_objects_and_copies_only_remotes_and_branches() -> None:
    files = seed_files(facts())
    assert files["HEAD"] == "ref: refs/heads/main\n"
    assert files["objects/info/alternates"] == HOST_OBJECTS + "\n"
    config = files["config"]
    assert '[remote "origin"]\n\turl = "https://me@example.org/x.git"' in config
    assert '[branch "main"]\n\tmerge = "refs/heads/main"' in config
    assert "fsmonitor" not in config and "hookspath" not in config.lower() and "include" not in config
    assert "s3cret" not in config
    assert files["packed-refs"].splitlines() == [
        "# pack-refs with: sorted ", f"{ONE} refs/heads/main", f"{ONE} refs/remotes/host/main", f"{TWO} refs/tags/v1"]


def test_config_values_are_quoted_so_no_value_opens_a_section(tmp_path: Path) -> None:
    """Read back by git itself: the value is the value, and no key was added beside it."""
    hostile = 'x"\n[core]\n\tfsmonitor = evil\\'
    config = tmp_path / "config"
    config.write_text(config_text(facts(config=(('remote.o "x.url', hostile), ("remote.o.url", hostile)))))
    listed = subprocess.run(["git", "config", "-f", str(config), "-z", "--list"], capture_output=True, text=True,
                            check=True).stdout
    pairs = [item.partition("\n") for item in listed.split("\0") if item]
    assert [(key, value) for key, _, value in pairs if not key.startswith("core.")] == [
        ('remote.o "x.url', hostile), ("remote.o.url", hostile)]
    assert "core.fsmonitor" not in [key for key, _, _ in pairs]


def test_a_sha256_repository_says_so() -> None:
    text = config_text(facts(object_format="sha256", config=()))
    assert "repositoryformatversion = 1" in text and "objectformat = sha256" in text


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:token@host/x.git", "https://user@host/x.git"),
    ("https://host/x.git", "https://host/x.git"),
    ("git@host:x.git", "git@host:x.git"),
    ("ssh://git@host/x.git", "ssh://git@host/x.git"),
])
def test_a_password_in_a_remote_url_stays_on_the_host(url: str, shown: str) -> None:
    assert without_password(url) == shown


@pytest.mark.parametrize("name", ["refs/heads/main", "refs/heads/feature/x-1", "refs/sandbox/heads/a.b"])
def test_plain_branch_names_pass(name: str) -> None:
    assert valid_ref(name)


@pytest.mark.parametrize("name", ["HEAD", "refs/heads/../../config", "refs/heads/.hidden", "refs/heads/a.lock",
                                  "refs/heads/a//b", "refs/heads/a@{1}", "refs/heads/a b", "refs/heads/a\nb",
                                  "refs/heads/", "refs/notes/x", "refs/heads/a/"])
def test_anything_else_is_refused(name: str) -> None:
    assert not valid_ref(name)


def test_parse_refs_keeps_only_well_formed_lines_below_the_prefix() -> None:
    text = "\n".join([f"{ONE} refs/heads/main", f"{TWO} refs/tags/v1", "zz refs/heads/bad", f"{ONE} refs/heads/..",
                      f"{ONE[:-1]} refs/heads/short", "garbage"])
    assert parse_refs(text, "sha1", "refs/heads/") == {"refs/heads/main": ONE}


def test_the_plan_fetches_new_tips_and_drops_branches_gone_from_the_vm() -> None:
    plan = plan_sync({"refs/heads/main": ONE, "refs/heads/new": TWO},
                     {"refs/sandbox/heads/main": ONE, "refs/sandbox/heads/old": TWO})
    assert plan.fetch == ("refs/heads/new",)
    assert plan.drop == ("refs/sandbox/heads/old",)
    assert plan_sync({"refs/heads/main": ONE}, {"refs/sandbox/heads/main": ONE}) == plan._replace(fetch=(), drop=())


def test_a_bundle_header_names_its_branches_and_stops_at_the_pack() -> None:
    handle = io.BytesIO(f"# v2 git bundle\n-{TWO} base\n{ONE} refs/heads/main\n\nPACK...".encode())
    assert read_bundle_header(handle, "sha1") == {"refs/heads/main": ONE}
    assert handle.read() == b"PACK..."


@pytest.mark.parametrize("header", [
    b"not a bundle\n\n",
    f"# v2 git bundle\n{ONE} refs/heads/../x\n\n".encode(),
    f"# v2 git bundle\n{ONE} HEAD\n\n".encode(),
    f"# v3 git bundle\n@filter=blob:none\n{ONE} refs/heads/main\n\n".encode(),
    f"# v2 git bundle\n{ONE} refs/heads/main".encode(),
])
def test_a_bundle_header_that_is_anything_else_is_refused(header: bytes) -> None:
    with pytest.raises(BadBundle):
        read_bundle_header(io.BytesIO(header), "sha1")


def test_a_fast_forward_outcome_is_read_from_among_the_refs() -> None:
    listed = "differs main\n" + "a" * 40 + " refs/heads/main\n"
    assert fast_forward_outcome(listed) == "differs main"
    assert fast_forward_outcome("a" * 40 + " refs/heads/main\n") == ""
    assert not nothing_pending(("", "differs main"), 0, 0)
    assert not nothing_pending(("", ""), 2, 1), "a branch the bundle lacked waits for the next sync"
    assert nothing_pending(("diverged main", "moved main"), 1, 1), "only a ref's change changes these"
