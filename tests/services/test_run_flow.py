"""The whole run flow (`Start.prepare`) on the fake runtime and the fake image engine, in milliseconds.

The image step builds the real Dockerfiles in the fake engine; `opencode serve` is a scripted
server in the fake VM. Each test checks what the flow did to the VM, the home volume, the
daemon and the project's recorded state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.types import SandboxStatus
from opencode_sandbox.services import daemon_control
from opencode_sandbox.services.image_step import UpdateCheck
from opencode_sandbox.services.start.daemon import DaemonStep
from opencode_sandbox.services.start.pipeline import ReadyVm, Start
from opencode_sandbox.state.store import ProjectState
from tests.fakes.image_engine import FakeImageEngine
from tests.fakes.runtime import FakeNode, FakeRuntime
from tests.services.app_fakes import SLUG, make_app, messages

VM = vm_name(SLUG)


class Serve:
    """`opencode serve` in the fake VM, as the fake guest operations start and stop it."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime = runtime
        self.server = runtime.guests.server(VM)

    @property
    def events(self) -> list[str]:
        return self.server.events

    @property
    def running(self) -> bool:
        sandbox = self.runtime.sandboxes.get(VM)
        return bool(self.server.running) and sandbox is not None and self.server.boot == sandbox.boots

    @running.setter
    def running(self, value: bool) -> None:
        self.server.running = self.server.answers = value


class Flow:
    """A project on the fake runtime, whose images the real image step builds in the fake engine."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.engine = FakeImageEngine()
        self.engine.add_image("debian:trixie-slim")
        self.runtime = FakeRuntime(image_engine=self.engine)
        self.root = root
        self.serve = Serve(self.runtime)
        self.answers: list[str] = []
        self.questions: list[str] = []
        record_baked_version(ToolPaths.from_environment().state_dir, "1.2.3")
        monkeypatch.setattr(UpdateCheck, "start", lambda self: None)
        monkeypatch.setattr(DaemonStep, "_healthy", lambda step: self.serve.running)
        monkeypatch.setattr(daemon_control, "wait_until_healthy",
                            lambda check, timeout_s, still_running=None: check())

    def change_the_image(self) -> None:
        """The user edits the Dockerfile on the host after the idle reaper stopped the VM: a
        change of the user's, which the guard on the files the host runs leaves alone."""
        from opencode_sandbox.services.guard.reviews import note_vm_stopped

        note_vm_stopped(ToolPaths.from_environment().state_dir, SLUG)
        folder = self.root / ".opencode-sandbox"
        folder.mkdir(exist_ok=True)
        (folder / "Dockerfile").write_text("FROM opencode-sandbox/runner-base:latest\nENV PROJECT_TOOL=2\n")

    def image_reference(self) -> str | None:
        return self.state().image_reference

    def choose(self, question: str, choices: object, default: str) -> str:
        """The user at the terminal: the answers the test readied, in order."""
        self.questions.append(question)
        assert self.answers, f"asked without an answer ready: {question}"
        return self.answers.pop(0)

    def confirm(self, question: str, default: bool) -> bool:
        raise AssertionError(f"not a yes-or-no question: {question}")

    def app(self, interactive: bool = False) -> App:
        app = make_app(self.runtime, self.root, interactive=interactive)
        app.console.asker = self
        return app

    def prepare(self, app: App | None = None, other_clients: int = 0) -> ReadyVm:
        return Start(app or self.app()).prepare(False, other_clients)

    def state(self) -> ProjectState:
        return self.app().state.load(SLUG)

    def calls(self, *operations: str) -> list[str]:
        return [operation for operation, name in self.runtime.calls if operation in operations]

    def volumes(self) -> list[str]:
        return sorted(volume.name for volume in self.runtime.list_volumes())

    def status(self) -> SandboxStatus | None:
        info = self.runtime.get_sandbox(VM)
        return info.status if info else None

    def write_home_file(self, volume: str, text: str) -> None:
        self.runtime.volumes[volume].files["notes.txt"] = FakeNode("file", "dev", 0o644, text)

    def home_file(self, volume: str) -> str | None:
        node = self.runtime.volumes[volume].files.get("notes.txt")
        return node.data if node else None


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flow]:
    root = tmp_path / "project"
    root.mkdir()
    made = Flow(root, monkeypatch)
    try:
        yield made
    finally:
        made.runtime.close()


def after_first_run(flow: Flow) -> str:
    """Runs the project once and forgets what that did; the home volume it made."""
    flow.prepare()
    flow.runtime.calls.clear()
    flow.serve.events.clear()
    [volume] = flow.volumes()
    return volume


def test_a_first_run_makes_the_home_volume_and_the_vm_and_starts_serve(flow: Flow) -> None:
    ready = flow.prepare()
    [volume] = flow.volumes()
    assert flow.calls("create_volume", "create_sandbox", "start_sandbox") == ["create_volume", "create_sandbox"]
    assert flow.status() is SandboxStatus.RUNNING
    assert flow.serve.events == ["start"]
    assert ready.name == VM and ready.password and ready.host_url.startswith("http://127.0.0.1:")
    state = flow.state()
    assert state.home_volume == volume and state.image_reference is not None
    assert state.image_reference.startswith(f"opencode-sandbox/runner-{SLUG}:")
    assert flow.engine.builds == ["opencode-sandbox/runner-base:latest", state.image_reference]
    loaded = flow.runtime.loaded_image(state.image_reference)
    assert loaded is not None and state.image_digest == loaded.digest
    assert state.project_root == str(flow.root) and state.config_fingerprint is not None


def test_a_warm_run_changes_nothing_and_asks_only_the_daemon(flow: Flow) -> None:
    volume = after_first_run(flow)
    before = flow.state()
    ready = flow.prepare()
    assert flow.calls("create_volume", "create_sandbox", "start_sandbox", "stop_sandbox", "remove_sandbox") == []
    assert flow.serve.events == []
    assert flow.state() == before and before.home_volume == volume
    assert daemon_control.read_password(flow.app().state.project_dir(SLUG)) == ready.password



def test_a_warm_run_reads_the_vm_once_and_takes_its_ports_from_that(flow: Flow) -> None:
    after_first_run(flow)
    ready = flow.prepare()
    assert flow.calls("get_sandbox", "port_map") == ["get_sandbox"]
    assert ready.ports == flow.runtime.port_map(VM) and ready.ports


def test_a_run_that_starts_the_vm_asks_for_its_ports_afresh(flow: Flow) -> None:
    after_first_run(flow)
    flow.runtime.stop_sandbox(VM)
    flow.runtime.calls.clear()
    ready = flow.prepare()
    assert flow.calls("get_sandbox", "port_map") == ["get_sandbox", "port_map"]
    assert ready.ports == flow.runtime.port_map(VM) and ready.ports

def test_only_a_start_that_leaves_the_running_vm_as_it_found_it_keeps_what_started_in_it_early(flow: Flow) -> None:
    assert not flow.prepare().kept_as_found  # made now
    assert flow.prepare().kept_as_found
    (flow.root / ".envrc").write_text("export EDITOR=vi\n")  # the VM writes a file the host runs
    reviewed = flow.prepare()
    assert not reviewed.kept_as_found and not (flow.root / ".envrc").exists()
    assert flow.prepare().kept_as_found
    configuration = Path.home() / ".config/opencode"
    configuration.mkdir(parents=True, exist_ok=True)
    (configuration / "AGENTS.md").write_text("Answer briefly.\n")
    assert not flow.prepare().kept_as_found  # copied into the VM's home now
    assert flow.prepare().kept_as_found
    flow.runtime.stop_sandbox(VM)
    flow.serve.running = False
    assert not flow.prepare().kept_as_found  # started now


def test_a_start_and_its_client_leaving_ask_git_for_its_directories_once_even_when_git_answers_nothing(
        flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    import opencode_sandbox.app
    import opencode_sandbox.project
    from opencode_sandbox.services.stopping import sync_git

    subprocess.run(["git", "init", "-q", str(flow.root)], check=True)
    asked: list[Path] = []

    class Refusing:  # as git answers a checkout of another user it does not trust
        def __init__(self, root: Path) -> None:
            asked.append(root)

        def answer(self) -> None:
            return None

    for module in (opencode_sandbox.app, opencode_sandbox.project):
        monkeypatch.setattr(module, "GitPathsQuery", Refusing)
    app = flow.app()
    assert app.project.is_git
    flow.prepare(app)
    sync_git(app)
    assert asked == [flow.root]


def test_a_run_after_stop_starts_the_vm_on_the_same_home_and_starts_serve(flow: Flow) -> None:
    volume = after_first_run(flow)
    flow.runtime.stop_sandbox(VM)
    flow.serve.running = False
    flow.prepare()
    assert flow.calls("create_volume", "create_sandbox", "start_sandbox") == ["start_sandbox"]
    assert flow.serve.events == ["start"]
    assert flow.state().home_volume == volume and flow.volumes() == [volume]


@pytest.mark.parametrize("answer", ["keep", "reset", "migrate"])
def test_a_changed_image_recreates_the_vm_with_the_home_the_user_chose(flow: Flow, answer: str) -> None:
    volume = after_first_run(flow)
    flow.write_home_file(volume, "mine")
    first = flow.image_reference()
    flow.change_the_image()
    flow.answers.append(answer)
    flow.prepare(flow.app(interactive=True))
    assert flow.calls("stop_sandbox", "remove_sandbox", "create_sandbox") == [
        "stop_sandbox", "remove_sandbox", "create_sandbox"]
    assert len(flow.questions) == 1 and "keep it, reset it from the new image, or migrate" in flow.questions[0]
    state = flow.state()
    assert state.image_reference not in (None, first)
    if answer == "keep":
        assert state.home_volume == volume and flow.volumes() == [volume]
        return
    assert state.home_volume != volume and sorted(flow.volumes()) == sorted([volume, state.home_volume])
    assert flow.home_file(state.home_volume) == ("mine" if answer == "migrate" else None)
    assert flow.serve.events == ["start"]


def test_a_changed_image_without_a_terminal_keeps_the_home_and_says_how_to_change_it(flow: Flow) -> None:
    volume = after_first_run(flow)
    first = flow.image_reference()
    flow.change_the_image()
    app = flow.app()
    flow.prepare(app)
    assert flow.image_reference() not in (None, first)
    assert flow.calls("remove_sandbox", "create_sandbox") == ["remove_sandbox", "create_sandbox"]
    assert flow.state().home_volume == volume and flow.volumes() == [volume]
    assert "`opencode-sandbox volume migrate` or `volume reset`" in messages(app)


@pytest.mark.parametrize("answer", ["defer", "proceed", "quit"])
def test_another_attached_client_is_asked_before_its_vm_is_recreated(flow: Flow, answer: str) -> None:
    volume = after_first_run(flow)
    first = flow.image_reference()
    flow.change_the_image()
    flow.answers.extend([answer, "keep"])
    app = flow.app(interactive=True)
    if answer == "quit":
        with pytest.raises(SandboxError, match="stopped at your request; nothing was changed"):
            flow.prepare(app, other_clients=1)
    else:
        flow.prepare(app, other_clients=1)
    assert "1 other client(s) are attached" in flow.questions[0]
    recreated = flow.calls("remove_sandbox", "create_sandbox") == ["remove_sandbox", "create_sandbox"]
    assert recreated is (answer == "proceed")
    assert flow.status() is SandboxStatus.RUNNING
    assert (flow.image_reference() != first) is (answer == "proceed")
    assert flow.state().home_volume == volume


def test_without_a_state_file_an_attached_client_still_keeps_its_vm_when_the_user_defers(flow: Flow) -> None:
    volume = after_first_run(flow)
    flow.app().state.state_path(SLUG).unlink()
    flow.change_the_image()
    flow.answers.append("defer")
    flow.prepare(flow.app(interactive=True), other_clients=1)
    assert "1 other client(s) are attached" in flow.questions[0]
    assert flow.calls("stop_sandbox", "remove_sandbox", "create_sandbox") == []
    assert flow.status() is SandboxStatus.RUNNING
    # which volume the kept VM runs on is not known here: none is recorded, none is made
    assert flow.state().home_volume is None and flow.volumes() == [volume]


def test_a_changed_opencode_configuration_restarts_serve_only_when_allowed(flow: Flow) -> None:
    after_first_run(flow)
    copies = flow.runtime.guests.unpacked.setdefault(VM, [])
    copies.clear()
    config = Path.home() / ".config" / "opencode"
    config.mkdir(parents=True, exist_ok=True)
    (config / "opencode.json").write_text('{"theme": "dark"}\n')
    flow.answers.append("defer")
    flow.prepare(flow.app(interactive=True), other_clients=1)
    assert "the opencode configuration changed: the server must restart" in flow.questions[0]
    assert flow.serve.events == []  # deferred: the attached client keeps its server
    assert len(copies) == 1 and b"opencode.json" in copies[0]
    flow.serve.events.clear()
    flow.prepare()  # no other client: the restart needs no question
    assert flow.serve.events == ["stop", "start"]
    assert len(flow.questions) == 1


def test_a_vm_that_does_not_boot_leaves_the_project_as_it_was(flow: Flow) -> None:
    volume = after_first_run(flow)
    before = flow.state()
    first = flow.image_reference()
    flow.change_the_image()
    flow.answers.append("reset")
    flow.runtime.boot_failures = ["Kernel doesn't fit in RAM"] * 2
    with pytest.raises(SandboxError):
        flow.prepare(flow.app(interactive=True))
    assert flow.volumes() == [volume]  # the volume made for the failed VM is gone, the old one kept
    assert flow.state() == before and before.image_reference == first


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_change_recreates_the_vm_keeping_its_own_host_port_and_a_busy_one_keeps_the_old_vm(
    flow: Flow,
) -> None:
    import socket

    from opencode_sandbox.config.loader import load_settings
    from opencode_sandbox.errors import UsageError

    def app_with(*ports: str) -> App:
        app = flow.app()
        app.settings = load_settings([], {}, {"ports": list(ports)})
        return app

    chosen = _free_port()
    first = flow.prepare(app_with(f"{chosen}:3000"))
    assert first.ports[3000] == chosen and set(first.ports) == {3000, 4096}
    second = flow.prepare(app_with(f"{chosen}:3000", "5173"))  # the VM's own port is no obstacle
    assert flow.calls("remove_sandbox") == ["remove_sandbox"]
    assert second.ports[3000] == chosen and set(second.ports) == {3000, 4096, 5173}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = int(squatter.getsockname()[1])
        with pytest.raises(UsageError, match=f"host port {busy} .* is already in use on 127.0.0.1"):
            flow.prepare(app_with(f"{chosen}:3000", f"{busy}:8000"))
    assert flow.calls("remove_sandbox") == ["remove_sandbox"]  # the old VM was left as it was
    assert flow.status() is SandboxStatus.RUNNING


def _opencode_config_changed(flow: Flow) -> None:
    config = Path.home() / ".config" / "opencode"
    config.mkdir(parents=True, exist_ok=True)
    (config / "opencode.json").write_text('{"theme": "light"}\n')


def _stopped(flow: Flow) -> None:
    flow.runtime.stop_sandbox(VM)
    flow.serve.running = False


def _serve_gone(flow: Flow) -> None:
    flow.serve.running = False


BRANCHES = {
    "first run": None,
    "warm run": lambda flow: None,
    "run after stop": _stopped,
    "changed image": lambda flow: flow.change_the_image(),
    "changed opencode configuration": _opencode_config_changed,
    "server gone": _serve_gone,
    "VM removed": lambda flow: (_stopped(flow), flow.runtime.remove_sandbox(VM)),
}


@pytest.mark.parametrize("branch", BRANCHES)
def test_the_dry_run_plans_what_the_start_then_carries_out(flow: Flow, branch: str) -> None:
    change = BRANCHES[branch]
    if change is not None:
        after_first_run(flow)
        change(flow)
    calls = len(flow.runtime.calls)
    planned = Start(flow.app()).plan()
    asked = {operation for operation, _ in flow.runtime.calls[calls:]}
    read_only = {"check_available", "get_sandbox", "get_volume", "loaded_image", "port_map", "server_running"}
    assert asked <= read_only, asked
    start = Start(flow.app())
    start.prepare(False, 0)
    assert planned.actions() == [(step.step, step.action) for step in start.carried_out]


def test_the_dry_run_names_the_question_another_attached_client_brings(flow: Flow) -> None:
    from opencode_sandbox.core.start_plan import Step
    from opencode_sandbox.state.leases import client_lease

    after_first_run(flow)
    _opencode_config_changed(flow)
    flow.change_the_image()
    app = flow.app()
    with client_lease(app.paths.state_dir, SLUG, "opencode-sandbox"):
        planned = dict(Start(app).plan().actions())
        [vm_line] = [line for line in Start(app).plan().lines() if line.startswith("vm: ")]
    assert planned[Step.VM] == "recreate" and "asked first, 1 other client(s) are attached" in vm_line
    assert dict(Start(flow.app()).plan().actions())[Step.VM] == "recreate"
