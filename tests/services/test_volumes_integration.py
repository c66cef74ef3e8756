"""`volume migrate|reset` through the command line on the docker runtime, killed mid-way.

Whatever moment the process dies at, the old volume is intact and the state file names a
complete volume.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, runner_image, vm_name
from opencode_sandbox.core.slug import slug_for_remote
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from opencode_sandbox.state.store import ProjectState, StateStore
from tests.cli.helpers import run_cli
from tests.services.engine_artifacts import build_image, clean_docker, docker, docker_answers, volume_exists

pytestmark = pytest.mark.docker

BIG_FILE_MIB = 1536


@dataclass(frozen=True)
class Checkout:
    folder: Path
    slug: str
    image: str
    old: str

    @property
    def store(self) -> StateStore:
        return StateStore(ToolPaths.from_environment().state_dir)


@pytest.fixture
def checkout(unique: str, tmp_path: Path) -> Iterator[Checkout]:
    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    folder = tmp_path / "checkout"
    folder.mkdir()
    remote = f"git@example.org:team/{unique}.git"
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "remote", "add", "origin", remote], cwd=folder, check=True)
    slug = slug_for_remote(remote)
    assert unique in slug
    try:
        image = runner_image(slug, "v1")
        build_image(image, tmp_path / "image", unique)
        old = home_volume_name(slug, datetime.now(UTC) - timedelta(hours=1))
        runtime = DockerRuntime()
        runtime.create_volume(old, managed_labels(slug))
        runtime.fill_volume_from_image(old, image)
        in_volume(old, "echo 'my notes' > /d/notes.txt && chown 1000:1000 /d/notes.txt")
        result = Checkout(folder, slug, image, old)
        result.store.save(slug, ProjectState(home_volume=old, image_reference=image))
        yield result
    finally:
        for name in docker("ps", "-a", "--quiet", "--filter", f"label=org.opencode-sandbox.slug={slug}").stdout.split():
            docker("rm", "--force", name)
        clean_docker(unique)


def in_volume(volume: str, script: str, readonly: bool = False) -> str:
    mount = f"type=volume,source={volume},target=/d" + (",readonly" if readonly else "")
    result = docker("run", "--rm", "--network", "none", "--mount", mount, "debian:trixie-slim", "sh", "-c", script,
                    check=True)
    return result.stdout


def volumes_of(slug: str) -> set[str]:
    return {name for name in docker("volume", "ls", "--quiet").stdout.split() if slug in name}


def start_cli(checkout: Checkout, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "opencode_sandbox", "--runtime", "docker", *args],
        cwd=checkout.folder, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )


def wait_for(condition: object, timeout_s: float, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        if process.poll() is not None:
            raise AssertionError(f"the command ended before the moment to kill it: {process.communicate()}")
        time.sleep(0.05)
    raise AssertionError("the moment to kill the command never came")


def assert_old_intact(checkout: Checkout, big: bool) -> None:
    assert in_volume(checkout.old, "cat /d/notes.txt /d/.from-image", readonly=True) == "my notes\nfrom the image\n"
    if big:
        size = in_volume(checkout.old, "stat -c %s /d/big", readonly=True).strip()
        assert int(size) == BIG_FILE_MIB * 1024 * 1024


def test_migrate_killed_in_the_middle_of_the_copy(checkout: Checkout) -> None:
    in_volume(checkout.old, f"dd if=/dev/urandom of=/d/big bs=1M count={BIG_FILE_MIB} status=none")
    process = start_cli(checkout, "volume", "migrate", "--rm")

    def copying() -> bool:
        helpers = docker("ps", "--quiet", "--filter", f"volume={checkout.old}",
                         "--filter", "label=org.opencode-sandbox.managed=helper").stdout.split()
        return bool(helpers)

    try:
        wait_for(copying, 120, process)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    for helper in docker("ps", "-a", "--quiet", "--filter", f"volume={checkout.old}").stdout.split():
        docker("wait", helper)  # the engine finishes the copy on its own; the CLI is gone
    assert checkout.store.load(checkout.slug).home_volume == checkout.old
    assert_old_intact(checkout, big=True)
    leftovers = volumes_of(checkout.slug) - {checkout.old}
    assert len(leftovers) == 1  # the unfinished volume, never recorded

    finished = run_cli("--runtime", "docker", "volume", "migrate", cwd=checkout.folder, timeout=600)
    assert finished.returncode == 0, finished.stderr
    new = checkout.store.load(checkout.slug).home_volume
    assert new not in (None, checkout.old) and new not in leftovers
    assert in_volume(str(new), "cat /d/notes.txt /d/.from-image && stat -c %s /d/big", readonly=True).split("\n")[:3] \
        == ["my notes", "from the image", str(BIG_FILE_MIB * 1024 * 1024)]
    assert f"{new} is now the home volume of project {checkout.slug}" in finished.stdout
    assert volume_exists(checkout.old)


def test_reset_killed_while_the_new_volume_is_filled(checkout: Checkout, tmp_path: Path) -> None:
    real_docker = shutil.which("docker")
    assert real_docker is not None
    shim = tmp_path / "shim"
    shim.mkdir()
    marker = tmp_path / "filling"
    (shim / "docker").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"managed=helper"*) touch {marker}; sleep 120;; esac\n'
        f'exec {real_docker} "$@"\n'
    )
    (shim / "docker").chmod(0o755)
    process = start_cli(checkout, "volume", "reset", "--rm",
                        env={"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"})
    try:
        wait_for(marker.exists, 60, process)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert checkout.store.load(checkout.slug).home_volume == checkout.old
    assert_old_intact(checkout, big=False)
    (unfinished,) = volumes_of(checkout.slug) - {checkout.old}
    assert in_volume(unfinished, "ls -A /d", readonly=True) == ""

    finished = run_cli("--runtime", "docker", "volume", "reset", "--rm", cwd=checkout.folder)
    assert finished.returncode == 0, finished.stderr
    new = checkout.store.load(checkout.slug).home_volume
    assert new is not None and new not in (checkout.old, unfinished)
    assert in_volume(new, "cat /d/.from-image; ls -A /d", readonly=True) == "from the image\n.bash_logout\n" \
        ".bashrc\n.from-image\n.profile\n"
    assert not volume_exists(checkout.old)
    assert f"removed {checkout.old}" in finished.stdout


def test_dry_run_and_a_running_vm(checkout: Checkout) -> None:
    preview = run_cli("--runtime", "docker", "volume", "migrate", "-n", "--rm", cwd=checkout.folder)
    assert preview.returncode == 0, preview.stderr
    lines = preview.stdout.splitlines()
    assert lines[0].startswith(f"dry-run: would create opencode-sandbox-home-{checkout.slug}-")
    assert lines[1:] == [
        f"dry-run: would copy every file of {checkout.old} on top of it",
        lines[2],
        f"dry-run: would remove {checkout.old}",
    ]
    assert volumes_of(checkout.slug) == {checkout.old}

    runtime = DockerRuntime()
    runtime.create_sandbox(SandboxSpec(vm_name(checkout.slug), checkout.image, 1, 256,
                                       labels=managed_labels(checkout.slug),
                                       mounts=(Mount(MountKind.VOLUME, checkout.old, "/home/dev"),)))
    refused = run_cli("--runtime", "docker", "volume", "reset", cwd=checkout.folder)
    assert refused.returncode == 1
    assert "is running" in refused.stderr and "opencode-sandbox stop" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert volumes_of(checkout.slug) == {checkout.old}


def test_edit_without_a_terminal_is_refused(checkout: Checkout) -> None:
    refused = run_cli("--runtime", "docker", "volume", "edit", cwd=checkout.folder)
    assert refused.returncode == 2 and "needs a terminal" in refused.stderr
    assert volumes_of(checkout.slug) == {checkout.old}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux drives the interactive shell")
def test_edit_in_a_real_shell_keeps_what_the_user_copied(checkout: Checkout, tmp_path: Path, unique: str) -> None:
    session = f"edit-{unique}"
    done = tmp_path / "exit-status"
    command = (f"cd {checkout.folder} && {sys.executable} -m opencode_sandbox --runtime docker volume edit; "
               f"echo $? > {done}")
    environment = [arg for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "MSB_HOME", "PATH")
                   for arg in ("-e", f"{key}={os.environ[key]}")]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "30", *environment, command],
                   check=True)
    try:
        deadline = time.monotonic() + 120
        while "old home at /mnt/old" not in _pane(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # let the shell start after the banner
        subprocess.run(["tmux", "send-keys", "-t", session, "cp /mnt/old/notes.txt ~/ && exit", "Enter"], check=True)
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.read_text().strip() == "0", _pane(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
    new = checkout.store.load(checkout.slug).home_volume
    assert new is not None and new != checkout.old
    assert in_volume(new, "cat /d/notes.txt /d/.from-image", readonly=True) == "my notes\nfrom the image\n"
    assert volume_exists(checkout.old)
    leftover = docker("ps", "-a", "--quiet", "--filter", f"name=opencode-sandbox-task-{checkout.slug}").stdout
    assert leftover.strip() == ""


def _pane(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=False).stdout
