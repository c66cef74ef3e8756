"""The whole run lifecycle through the CLI, on the docker runtime with the real runner image."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import LABEL_IMAGE_DIGEST
from opencode_sandbox.state.store import StateStore
from tests.e2e.harness import Project, ServeOnly, docker, make_project

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

FROM_BASE = "FROM opencode-sandbox/runner-base:latest\n"


def test_first_run_warm_run_and_run_after_stop(project: Project) -> None:
    first = project.shell("id -un; pwd; echo $OPENCODE_DISABLE_AUTOUPDATE; exit 7")
    assert first.returncode == 7, first.stderr
    # dev is never uid 0: for a root host user it keeps the image's uid, named dev
    assert first.stdout.splitlines() == ["dev", "/workspace", "true"]
    assert "Creating" in first.stderr
    vm_id = project.container_id()
    assert project.container_state() == "running"
    assert len(project.home_volumes()) == 1

    warm = project.shell("cat README.md")
    assert warm.returncode == 0
    assert warm.stdout == "# e2e\n"
    assert "Creating" not in warm.stderr and "Starting" not in warm.stderr
    assert project.container_id() == vm_id

    docker("stop", "-t", "1", project.vm, check=True)
    after_stop = project.shell("echo again > ~/mark; cat ~/mark")
    assert after_stop.returncode == 0, after_stop.stderr
    assert after_stop.stdout == "again\n"
    assert project.container_id() == vm_id
    assert project.container_state() == "running"
    assert len(project.home_volumes()) == 1
    assert project.serve_processes() == 0, "a shell starts no opencode serve"


def test_the_vm_reuses_its_state_and_home_after_being_deleted(project: Project) -> None:
    assert project.shell("echo kept > ~/note").returncode == 0
    docker("rm", "-f", project.vm, check=True)
    again = project.shell("cat ~/note")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "kept\n"


def test_a_missing_home_volume_is_replaced_with_a_warning(project: Project) -> None:
    assert project.shell("true").returncode == 0
    [volume] = project.home_volumes()
    docker("rm", "-f", project.vm, check=True)
    docker("volume", "rm", volume, check=True)
    result = project.shell("ls -a ~ | grep -c . >/dev/null && echo ok")
    assert result.returncode == 0, result.stderr
    assert f"the home volume {volume} recorded for this project no longer exists" in result.stderr
    assert project.home_volumes() != [volume] and len(project.home_volumes()) == 1


def test_dockerfile_change_keeps_the_home_volume_when_not_interactive(project: Project) -> None:
    assert project.shell("echo mine > ~/mine").returncode == 0
    [volume] = project.home_volumes()
    old_id = project.container_id()
    # Edited while no VM runs: an edit made while one runs is reviewed like the VM's (docs/security.md).
    assert project.cli("stop").returncode == 0
    project.write_dockerfile(FROM_BASE + "RUN echo from-image > /home/dev/from-image\n")
    result = project.shell("cat ~/mine; test -e ~/from-image && echo has-new || echo no-new")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["mine", "no-new"]
    assert f"keeping the home volume {volume}" in result.stderr
    assert project.container_id() != old_id
    assert project.home_volumes() == [volume]
    labels = json.loads(docker("inspect", "--format", "{{json .Config.Labels}}", project.vm).stdout)
    booted_from = docker("inspect", "--format", "{{.Image}}", project.vm).stdout.strip()
    assert labels[LABEL_IMAGE_DIGEST] == booted_from


def test_provisioning_copies_changed_config_and_project_overrides(project: Project, isolated_home: Path) -> None:
    config = isolated_home / ".config" / "opencode"
    config.mkdir(parents=True)
    (config / "opencode.json").write_text('{"theme": "first"}\n')
    ServeOnly(project).detach()  # the server starts with the configuration it was given
    started = project.shell("cat ~/.config/opencode/opencode.json")
    assert started.returncode == 0, started.stderr
    # opencode itself may add keys such as $schema when it reads the file
    assert json.loads(started.stdout)["theme"] == "first"
    first_fingerprint = _recorded(project, "config_fingerprint")
    assert first_fingerprint is not None

    (config / "opencode.json").write_text('{"theme": "second"}\n')
    assert project.cli("stop").returncode == 0  # the checkout's own files are edited with no VM running
    override = project.root / ".opencode-sandbox" / "opencode" / "agent"
    override.mkdir(parents=True)
    (override / "review.md").write_text("review agent\n")
    changed = project.shell("cat ~/.config/opencode/opencode.json; cat ~/.config/opencode/agent/review.md")
    assert changed.returncode == 0, changed.stderr
    body, _, agent = changed.stdout.rpartition("}")
    assert json.loads(body + "}")["theme"] == "second"
    assert agent.strip() == "review agent"
    # a shell starts no server: the one recorded still runs the first configuration, so the next
    # run restarts it with this one
    assert _recorded(project, "config_fingerprint") == first_fingerprint
    assert project.serve_processes() == 0
    ServeOnly(project).detach()
    assert _recorded(project, "config_fingerprint") not in (None, first_fingerprint)


def test_provisioning_reads_no_link_the_checkout_holds(project: Project, isolated_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository that commits links in its opencode folder gets neither the launcher's
    environment nor a file of the user's into the VM home, and the user is told."""
    secret_file = isolated_home / "private.txt"
    secret_file.write_text("private-to-the-user-3f9a\n")
    secret_file.chmod(0o600)
    monkeypatch.setenv("PROVISION_LINK_VALUE", "kept-on-the-host-7c1d")
    folder = project.root / ".opencode-sandbox" / "opencode"
    folder.mkdir(parents=True)
    (folder / "env.txt").symlink_to("/proc/self/environ")
    (folder / "notes.md").symlink_to(secret_file)
    (folder / "outside").symlink_to(isolated_home, target_is_directory=True)
    (folder / "agent.md").write_text("copied\n")
    shown = project.shell("ls -A ~/.config/opencode; cat ~/.config/opencode/agent.md; "
                          "grep -rl 'kept-on-the-host\\|private-to-the-user' ~ 2>/dev/null; true")
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split()
    assert "agent.md" in listed and "copied" in listed
    assert not {"env.txt", "notes.md", "outside"} & set(listed), shown.stdout
    assert "kept-on-the-host" not in shown.stdout and "private-to-the-user" not in shown.stdout, shown.stdout
    assert shown.stdout.strip().endswith("copied"), f"a file in the VM holds what the links led to: {shown.stdout}"
    assert "not copied into the VM" in shown.stderr and "env.txt" in shown.stderr, shown.stderr


def _recorded(project: Project, key: str) -> str | None:
    state = StateStore(project.state_dir.parent).load(project.slug)
    value = getattr(state, key)
    return value if isinstance(value, str) else None


def _serve_only(project: Project, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "opencode_sandbox", "run", "--serve-only", *extra],
        cwd=project.root, env={**os.environ, **project.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not any(line.startswith("password:") for line in lines):
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
    url = next((line.split()[1] for line in lines if line.startswith("URL:")), "")
    password = next((line.split()[1] for line in lines if line.startswith("password:")), "")
    if not (url and password):
        if process.poll() is None and not lines:  # its output closed: it is ending
            process.wait(60)
        failure = process.stderr.read() if process.poll() is not None and process.stderr else "(still running)"
        raise AssertionError(f"no URL or password: {lines}; exit status {process.returncode}; {failure}")
    return process, url, password


@pytest.mark.parametrize("workspace", ["shared", "isolated"])
def test_worktree_is_created_inside_the_vm(project: Project, workspace: str) -> None:
    project.env["OPENCODE_SANDBOX_WORKSPACE"] = workspace
    process, _url, _password = _serve_only(project, "-w", "feature/login")
    try:
        listing = project.shell("git worktree list")
        assert listing.returncode == 0, listing.stderr
        assert "opencode/feature-login" in listing.stdout
        host_worktrees = subprocess.run(["git", "-c", "safe.directory=*", "worktree", "list"], cwd=project.root,
                                        capture_output=True, text=True).stdout
        assert len(host_worktrees.strip().splitlines()) >= 1
    finally:
        process.terminate()
        process.wait(30)


def test_bad_worktree_name_and_base(project: Project) -> None:
    bad_name = project.cli("run", "-w", "Bad Name!")
    assert bad_name.returncode == 2
    assert "invalid worktree name 'Bad Name!'" in bad_name.stderr
    process, _url, _password = _serve_only(project)
    process.terminate()
    process.wait(30)
    bad_base = project.cli("run", "--serve-only", "-w", "fix:no-such-ref")
    assert bad_base.returncode == 1
    assert "no-such-ref" in bad_base.stderr
    assert "Traceback" not in bad_base.stderr


def test_attach_needs_a_terminal(project: Project) -> None:
    result = project.cli("run")
    assert result.returncode == 2
    assert "opencode attach needs a terminal" in result.stderr


def test_dry_run_changes_nothing(project: Project) -> None:
    result = project.cli("run", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"vm: create ({project.vm}: no VM exists for this project)" in result.stdout.splitlines()
    assert project.vms() == []
    assert project.home_volumes() == []


def test_concurrent_first_starts_share_one_vm(tmp_path: Path, unique: str, project: Project) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: project.shell("true"), range(8)))
    assert [result.returncode for result in results] == [0] * 8, [r.stderr for r in results if r.returncode]
    assert project.vms() == [project.vm]
    assert len(project.home_volumes()) == 1


def test_outside_a_git_repository(tmp_path: Path, unique: str, project: Project) -> None:
    plain = tmp_path / f"plain {unique}"
    plain.mkdir()
    result = project.cli("run", "--dry-run", cwd=plain)
    assert result.returncode == 0
    assert "is not inside a git repository" in result.stderr
    _ = make_project  # the helper builds git projects; a plain folder needs none


@pytest.mark.parametrize("written", [
    "egress-allow: ['0.0.0.0/0']\n", "network: all\n", "dind: true\nnetwork: all\n", "runtime: docker\n",
    "releases-url: http://169.254.169.254/latest\n",
])
def test_a_cloned_checkout_cannot_widen_its_own_vm(project: Project, written: str) -> None:
    """A repository's own configuration file that would let its VM reach further stops the start
    before anything is made, naming the file where the user may set it."""
    (project.root / ".opencode-sandbox").mkdir(exist_ok=True)
    (project.root / ".opencode-sandbox" / "config.yaml").write_text(written)
    refused = project.shell("true")
    assert refused.returncode != 0
    assert "in the project's checkout, which the agent in the VM can write" in refused.stderr, refused.stderr
    assert str(project.paths.config_dir / "config.yaml") in refused.stderr, refused.stderr
    assert project.vm_info() is None and project.home_volumes() == []
