"""A VM where `opencode serve` cannot start says why, on the docker runtime with real images."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.config.keys import KEYS_BY_NAME
from opencode_sandbox.images.updater import record_baked_version
from tests.e2e.harness import Project, ServeOnly, docker, make_project
from tests.fixtures.host_users import HostUser
from tests.fixtures.images import RunnerBase

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

STRANGER = (4242, 4242)


@pytest.fixture
def other_user_project(tmp_path: Path, unique: str, runner_base_image: RunnerBase,
                       other_host_user: HostUser) -> Iterator[Project]:
    """A fresh project on the docker runtime, run by uid 1001: `dev` is uid 1001 in its VM."""
    created = make_project(tmp_path / f"checkout {unique}", unique, other_host_user)
    assert created.home is not None
    record_baked_version(created.paths.state_dir, runner_base_image.opencode_version)
    other_host_user.give(created.home)
    created.env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h")
    try:
        yield created
    finally:
        created.cleanup()


def test_a_home_of_another_owner_is_named_with_its_fix(other_user_project: Project) -> None:
    project = other_user_project
    assert project.shell("true").returncode == 0
    [volume] = project.home_volumes()
    healthy = project.cli("doctor")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert f"home    dev (uid 1001, gid 1001) can use its home in {project.vm}" in healthy.stdout
    chowned = project.root_in_home("chown -R {}:{} /home/dev".format(*STRANGER))
    assert chowned.returncode == 0, chowned.stderr
    mode = docker("exec", project.vm, "stat", "-c", "%a", "/home/dev").stdout.strip()
    doctor = project.cli("doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert f"home    in {project.vm}: dev cannot write its home: /home/dev belongs to uid 4242" in doctor.stdout
    assert volume in doctor.stdout.split("dev cannot write its home", 1)[1]
    assert "this project's VM cannot work as it is (home)" in doctor.stderr
    assert project.cli("stop").returncode == 0

    # a shell command needs no daemon: it runs, and leaves opencode serve to the next run
    shelled = project.shell("echo ran")
    assert shelled.returncode == 0, shelled.stderr
    assert shelled.stdout == "ran\n"
    assert "opencode serve" not in shelled.stderr, shelled.stderr

    failed = project.cli("run", "--serve-only", timeout=300)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert (f"error: cannot start opencode serve in {project.vm}: dev cannot write its home: /home/dev belongs to "
            f"uid 4242, gid 4242 (mode {mode}) and dev is uid 1001, gid 1001\n") in failed.stderr, failed.stderr
    hint = failed.stderr.split("hint:", 1)[1]
    assert volume in hint and "`opencode-sandbox volume migrate`" in hint
    assert "opencode on the PATH" not in failed.stderr

    # the fix the hint gives works: the files move to a new home volume that dev owns
    assert project.cli("stop").returncode == 0
    migrated = project.cli("volume", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    again = project.shell("stat -c %u ~ ~/.bashrc && touch ~/written")
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["1001", "1001"]


def test_an_image_without_opencode_says_to_rebuild(project: Project) -> None:
    project.write_dockerfile(
        "FROM opencode-sandbox/runner-base:latest\nUSER root\nRUN rm /usr/local/bin/opencode\nUSER dev\n"
    )
    failed = project.cli("run", "--serve-only", timeout=600)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"cannot start opencode serve in {project.vm}: opencode is not on dev's PATH" in failed.stderr
    assert "`opencode-sandbox build -r`" in failed.stderr.split("hint:", 1)[1]


def test_a_data_folder_of_another_owner_is_named_when_opencode_serve_dies(other_user_project: Project) -> None:
    project = other_user_project
    assert project.shell("mkdir -p ~/.local/share/opencode").returncode == 0
    folder = "/home/dev/.local/share/opencode"
    chowned = project.root_in_home(f"chown -R 4242:4242 {folder} && chmod 700 {folder}")
    assert chowned.returncode == 0, chowned.stderr
    assert project.cli("stop").returncode == 0

    began = time.monotonic()
    failed = project.cli("run", "--serve-only", timeout=300)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    start_timeout_s = KEYS_BY_NAME["daemon-start-timeout"].default.total_seconds()
    assert time.monotonic() - began < start_timeout_s, "a dead opencode serve is not waited for"
    assert (f"error: opencode serve did not come up in {project.vm}: dev cannot write its home: {folder} belongs to "
            "uid 4242, gid 4242 (mode 700) and dev is uid 1001, gid 1001\n") in failed.stderr, failed.stderr


SLOW_SERVE_S = 12
SLOW_OPENCODE = (
    "FROM opencode-sandbox/runner-base:latest\nUSER root\n"
    "RUN mkdir /opt/real && ln -s \"$(readlink -f /usr/local/bin/opencode)\" /opt/real/opencode && "
    "rm /usr/local/bin/opencode && "
    f"printf '#!/bin/sh\\nsleep {SLOW_SERVE_S}\\nexec /opt/real/opencode \"$@\"\\n' "
    "> /usr/local/bin/opencode && "
    "chmod 755 /usr/local/bin/opencode\nUSER dev\n"
)


def test_a_slow_opencode_serve_is_waited_for_as_long_as_daemon_start_timeout(project: Project) -> None:
    project.write_dockerfile(SLOW_OPENCODE)
    project.env["OPENCODE_SANDBOX_DAEMON_START_TIMEOUT"] = "3s"
    failed = project.cli("run", "--serve-only", timeout=600)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"error: opencode serve did not answer within 3 s in {project.vm}" in failed.stderr, failed.stderr
    assert "raise daemon-start-timeout" in failed.stderr.split("hint:", 1)[1]
    report = failed.stderr.split("the end of its log:", 1)[1]
    assert "opencode serve has printed nothing: it never got as far as listening." in report, failed.stderr
    assert "Its processes in the VM:" in report and f"sleep {SLOW_SERVE_S}" in report, failed.stderr
    assert project.cli("stop").returncode == 0

    project.env["OPENCODE_SANDBOX_DAEMON_START_TIMEOUT"] = "5m"
    began = time.monotonic()
    server = ServeOnly(project)
    try:
        assert time.monotonic() - began > SLOW_SERVE_S
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.detach()
