"""The msb and docker processes of a `shell -- true` on the microsandbox runtime, whole, from the
command's action to its exit: with the VM running and opencode serve answering (a warm start),
and with the VM stopped. msb is a scripted executable that records each call, the Docker engine
a scripted unix socket, and the `docker` command on PATH only records that it ran.

Each msb process costs 5 to 20 ms on hardware and 1 to 5 s under emulation (`docs/performance.md`),
so the list of calls is the cost of a start beside its command."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from opencode_sandbox import plain_http
from opencode_sandbox.app import App
from opencode_sandbox.cli.actions import apply_global_flags, shell_in_project
from opencode_sandbox.core.naming import (
    BASE_IMAGE,
    BASE_IMAGES,
    LABEL_OPENCODE_VERSION,
    home_volume_name,
    managed_labels,
    runner_image,
    vm_name,
)
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.engine.docker import DockerImageEngine
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.images.image_document import env_of
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.project import git_paths, resolve_project
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck
from opencode_sandbox.services import daemon_control, image_record, reaper_spawn, vm_git
from opencode_sandbox.services.image_step import ReadyImage, UpdateCheck
from opencode_sandbox.services.start.daemon import DaemonStep
from opencode_sandbox.services.start.spec import sandbox_spec, vm_shape
from opencode_sandbox.state.store import ProjectState, StateStore
from opencode_sandbox.state_layout import StateLayout
from opencode_sandbox.ui.console import Console, LogLevel
from tests.fixtures.scripted_engine import ScriptedEngine, json_answer
from tests.fixtures.scripted_msb import ScriptedMsb, answer

OPENCODE_VERSION = "1.2.3"
IMAGE_ID = "sha256:" + "ab" * 32
DAEMON_HOST_PORT = 50123

_RECORDING_DOCKER = """#!{python}
import json, sys
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
sys.exit(1)
"""

_RECORDING_GIT = """#!/bin/sh
printf '%s\\n' "$*" >> {log!r}
exec {git!r} "$@"
"""


class ShellStart:
    """A git checkout whose project already ran once: its image built and checked, its home
    volume made, its VM created, and opencode serve started in it."""

    def __init__(self, root: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.folder = folder
        self.monkeypatch = monkeypatch
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        monkeypatch.chdir(root)
        self.slug = resolve_project(root).slug
        self.vm = vm_name(self.slug)
        self.image = runner_image(self.slug, "c0ffee0123ab")
        self.volume = home_volume_name(self.slug, datetime(2030, 1, 1, tzinfo=UTC))
        self.engine = ScriptedEngine(folder / "docker.sock", self._engine_answer)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{self.engine.path}")
        self.connections_made = 0
        connect = plain_http.unix_connect

        def counted(socket_path: str, timeout_s: float | None) -> socket.socket:
            self.connections_made += socket_path == self.engine.path
            return connect(socket_path, timeout_s)

        monkeypatch.setattr(plain_http, "unix_connect", counted)
        self.docker_log = folder / "docker-calls.jsonl"
        self.git_log = folder / "git-calls.txt"
        self._put_recording_docker_on_path()
        self.state_dir = ToolPaths.from_environment().state_dir
        self._hold_the_image_inputs(monkeypatch)
        self._quiet_the_start(monkeypatch)
        self.project_dir = StateStore(self.state_dir).project_dir(self.slug)
        self._ran_once()

    # the Docker engine ---------------------------------------------------------------------
    def _documents(self) -> dict[str, dict[str, Any]]:
        base = {reference: {"Id": f"sha256:{index:064x}", "Config": {"Labels": {}, "Env": []}}
                for index, reference in enumerate(BASE_IMAGES, start=1)}
        project = {"Id": IMAGE_ID, "Config": {"Labels": {LABEL_OPENCODE_VERSION: OPENCODE_VERSION},
                                              "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}}
        return {**base, self.image: project}

    def _engine_answer(self, method: str, target: str, headers: dict[str, str], body: bytes,
                       connection: socket.socket) -> None:
        documents = self._documents()
        reference = unquote(target.removeprefix("/images/").removesuffix("/json"))
        if method == "GET" and target.startswith("/images/") and reference in documents:
            reply = json_answer("200 OK", documents[reference])
        else:
            reply = json_answer("404 Not Found", {"message": f"No such image: {reference}"})
        connection.sendall(reply)

    def engine_requests(self) -> list[str]:
        return [f"{method} {target}" for method, target, _, _ in self.engine.requests]

    def _put_recording_docker_on_path(self) -> None:
        folder = self.folder / "bin"
        folder.mkdir()
        program = folder / "docker"
        program.write_text(_RECORDING_DOCKER.format(python=sys.executable, log=str(self.docker_log)))
        program.chmod(0o755)
        real_git = shutil.which("git")
        assert real_git is not None
        (folder / "git").write_text(_RECORDING_GIT.format(log=str(self.git_log), git=real_git))
        (folder / "git").chmod(0o755)
        self.monkeypatch.setenv("PATH", f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin")

    def git_calls(self) -> list[str]:
        return self.git_log.read_text().splitlines() if self.git_log.exists() else []

    def docker_calls(self) -> list[list[str]]:
        if not self.docker_log.exists():
            return []
        return [json.loads(line) for line in self.docker_log.read_text().splitlines()]

    # what a start does besides msb and docker -------------------------------------------------
    def _hold_the_image_inputs(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The image check's inputs from outside the test (the package's Dockerfiles, the host's CA
        folder) as copies of its own, so nothing else on the machine can move them between the
        set-up and the start."""
        packaged = self.folder / "dockerfiles"
        shutil.copytree(image_record.PACKAGED_DIR, packaged)
        host_ca = self.folder / "host-ca"
        host_ca.mkdir()
        (host_ca / "corp.crt").write_text("certificate\n")
        monkeypatch.setattr(image_record, "PACKAGED_DIR", packaged)
        monkeypatch.setattr(image_record, "HOST_CA_DIR", host_ca)


    def _quiet_the_start(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No release check, no auto-prune (one ran within the hour), no idle reaper process, and
        opencode serve answers its health check."""
        monkeypatch.setattr(UpdateCheck, "start", lambda self: None)
        stamp = StateLayout(self.state_dir).auto_prune_stamp
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
        monkeypatch.setattr(reaper_spawn, "spawn_reaper", lambda settings: 1)
        monkeypatch.setattr(DaemonStep, "_healthy", lambda step: True)
        monkeypatch.setattr(MicrosandboxRuntime, "kvm", lambda runtime: KvmCheck(True))

    def _ran_once(self) -> None:
        """What the first run left: the image check's record, the home volume and the VM's own
        git directory recorded, the password of opencode serve."""
        record_baked_version(self.state_dir, OPENCODE_VERSION)
        (self.root / ".opencode-sandbox").mkdir()  # every start makes it, before the image step
        app = self.app()
        self.recorded_inputs = image_record.signature_inputs(DockerImageEngine(), app.project, app.settings,
                                                             OPENCODE_VERSION)
        signature = image_record.inputs_signature(DockerImageEngine(), app.project, app.settings, OPENCODE_VERSION)
        self.start_inputs: list[dict[str, object]] = []
        recorded = image_record.signature_inputs

        def seen_by_the_start(*args: Any) -> dict[str, object]:
            inputs = recorded(*args)
            self.start_inputs.append(inputs)
            return inputs

        self.monkeypatch.setattr(image_record, "signature_inputs", seen_by_the_start)
        document = self._documents()[self.image]
        image_record.remember(self.project_dir, signature, image_record.CheckedImage(
            self.image, IMAGE_ID, env_of(document), OPENCODE_VERSION, {LABEL_OPENCODE_VERSION: OPENCODE_VERSION}))
        layout = vm_git.layout(self.root, self.project_dir, git_paths(self.root))
        assert layout is not None
        vm_git.ensure_seeded(layout)
        daemon_control.new_password(self.project_dir)
        StateStore(self.state_dir).save(self.slug, ProjectState(
            home_volume=self.volume, image_reference=self.image, image_digest=IMAGE_ID, project_root=str(self.root)))
        ready = ReadyImage(self.image, IMAGE_ID, env_of(document), OPENCODE_VERSION, False)
        self.labels = sandbox_spec(app, vm_shape(app, (), layout), ready, self.volume, True).labels
        self.engine.requests.clear()

    def app(self) -> App:
        console = Console(LogLevel.INFO, stream=sys.stderr)
        return App.open(console, self.root, {}, assume_yes=False, interactive=False)

    # msb -------------------------------------------------------------------------------------
    def inspected(self, status: str) -> str:
        """`msb inspect VM --format json` of the project's VM."""
        ports = [{"guest_port": DAEMON_PORT, "host_port": DAEMON_HOST_PORT, "protocol": "tcp"}]
        config = {"image": {"Oci": {"reference": self.image}}, "labels": dict(self.labels),
                  "network": {"ports": ports}, "mounts": [{"type": "Named", "name": self.volume}], "env": []}
        return json.dumps({"name": self.vm, "status": status, "created_at": "2030-01-01T00:00:00Z",
                           "config": config, "active_config": config if status == "Running" else None})

    def msb(self, *vm_states: str) -> ScriptedMsb:
        """msb as the first run left it; `msb inspect` answers each of `vm_states` in turn."""
        labels = ", ".join(f"{key}={value}" for key, value in sorted(managed_labels(self.slug).items()))
        volume = (f"Name:                 {self.volume}\nKind:                 dir\nQuota:                unlimited\n"
                  f"Path:                 {self.folder / 'volumes' / self.volume}\n"
                  f"Created:              2030-01-01 00:00:00\nLabels:               {labels}\n")
        image = json.dumps({"reference": self.image, "size_bytes": 1, "created_at": "2030-01-01T00:00:00Z",
                            "config": {"digest": IMAGE_ID, "labels": {}}})
        scripted = ScriptedMsb.at(self.folder / "msb", {
            "--version": [answer("msb 0.7.11\n")],
            "image inspect": [answer(image)],
            "volume list": [answer(json.dumps([{"name": self.volume, "kind": "dir"}]))],
            "volume inspect": [answer(volume)],
            "inspect": [answer(self.inspected(state)) for state in vm_states],
            "start": [answer()],
            "exec": [answer()],
        })
        self.monkeypatch.setenv("MSB_PATH", str(scripted.folder / "msb"))
        return scripted

    def shell_true_or_say_why(self) -> int:
        """`shell_true`, failing with what the scripted engine was asked when the start fails."""
        try:
            return self.shell_true()
        except SandboxError as error:
            pytest.fail(f"{error.message}; the engine was asked {self.engine_requests()}, "
                        f"dropped {self.engine.dropped}; docker ran {self.docker_calls()}; "
                        f"the image check's inputs that moved since the set-up: {self.moved_inputs()}; "
                        f"connections made to the engine's socket {self.connections_made}, accepted by its "
                        f"thread {self.engine.accepted}; other threads of this process: {other_threads()}")

    def moved_inputs(self) -> dict[str, tuple[object, object]]:
        """Each input of the image check's signature that the start saw otherwise than the set-up
        recorded: the recorded value and the start's."""
        moved: dict[str, tuple[object, object]] = {}
        for inputs in self.start_inputs:
            moved.update({name: (self.recorded_inputs.get(name), value)
                          for name, value in inputs.items() if self.recorded_inputs.get(name) != value})
        return moved

    def shell_true(self) -> int:
        console = Console(LogLevel.INFO, stream=sys.stderr)
        opener = apply_global_flags(console, assume_yes=False, quiet=False, log_level=None, runtime=None)
        return shell_in_project(opener, root=False, rebuild=False, dry_run=False, cpus=None, memory=None,
                                network=None, publish=(), command=["true"])


def other_threads() -> list[str]:
    """The threads besides this one, each with where it is: one left by an earlier test that still
    accepts on a reused descriptor would answer the engine's connections in its place."""
    import threading
    import traceback

    frames = sys._current_frames()
    return [f"{thread.name} at {traceback.format_stack(frames[thread.ident])[-1].strip()}"
            for thread in threading.enumerate()
            if thread is not threading.current_thread() and thread.ident in frames]


GIT_SYNC = "exec: the VM's git branches"
SEND_HOST_BRANCHES = "exec: the host's branches to the VM"
SERVE_START = "exec: start opencode serve"


def described(call: list[str]) -> str:
    """An msb call as a reader of the start knows it: the subcommand and its object, and for an
    exec what it runs."""
    if call[0] != "exec":
        words = call[:-2] if call[-2:] == ["--format", "json"] else call
        return " ".join(word for word in words if not word.startswith("-") or word == "--version")
    argv = call[call.index("--") + 1:]
    if argv[:2] == ["sh", "-c"] and argv[3:4] == ["refs"]:
        return GIT_SYNC
    if argv[:2] == ["sh", "-c"] and argv[3:4] == ["send"]:
        return SEND_HOST_BRANCHES
    if "OPENCODE_SERVER_PASSWORD" in call[:call.index("--")]:
        return SERVE_START
    return f"exec {' '.join(argv)}"


@pytest.fixture
def start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ShellStart]:
    folder = Path(tempfile.mkdtemp(prefix="msb-start-"))  # a unix socket's path must stay short
    made = ShellStart(tmp_path / "project", folder, monkeypatch)
    try:
        yield made
    finally:
        made.engine.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_warm_shell_asks_msb_about_the_vm_once_and_syncs_git_only_after_a_change(
    start: ShellStart, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vm_git, "RACY_S", 0.0)  # the checkout was made a moment ago
    msb = start.msb("Running", "Running", "Running")
    assert start.shell_true_or_say_why() == 0
    assert [described(call) for call in msb.calls] == [f"inspect {start.vm}", GIT_SYNC, "exec true"], \
        "the image and the home volume are the running VM's own: nothing to ask; the sync after the " \
        "command found both sides as the one before left them"
    assert start.docker_calls() == []
    assert start.engine_requests() == [f"GET /images/{reference}/json" for reference in (BASE_IMAGE, start.image)]

    seen, git_seen = len(msb.calls), len(start.git_calls())
    assert start.shell_true() == 0
    assert [described(call) for call in msb.calls[seen:]] == [f"inspect {start.vm}", "exec true"]
    assert [call.split()[0] for call in start.git_calls()[git_seen:]] == ["rev-parse"], \
        "one git process: where the git directory and the hooks are, for the sync and the guard alike"

    seen = len(msb.calls)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "--allow-empty",
                    "-m", "on the host"], cwd=start.root, check=True)
    assert start.shell_true() == 0
    assert [described(call) for call in msb.calls[seen:]] == [f"inspect {start.vm}", GIT_SYNC, SEND_HOST_BRANCHES,
                                                              "exec true"], \
        "a host commit is passed on (this msb's VM writes nothing, so the sync after the command finds its refs " \
        "unchanged; a real VM's would look once more)"


def test_a_shell_after_stop_asks_the_vm_again_only_after_starting_it(start: ShellStart) -> None:
    msb = start.msb("Stopped", "Running")
    assert start.shell_true() == 0
    calls = [described(call) for call in msb.calls]
    assert calls[:4] == [
        f"inspect {start.vm}",
        f"volume inspect {start.volume}",
        f"start {start.vm}",
        f"inspect {start.vm}",
    ]
    assert calls[4:] == [GIT_SYNC, "exec true", GIT_SYNC], "a shell starts no opencode serve"
    assert start.docker_calls() == []
