"""`ports` and the checks before a start: the project VM's published ports, and chosen host ports in use."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.cli.render import render_ports
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.core.ports import PublishedPort
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import RuntimeKind, SandboxStatus
from opencode_sandbox.services.published_ports import project_ports, refuse_busy_host_ports
from opencode_sandbox.services.start import client as clients
from opencode_sandbox.services.start.pipeline import ReadyVm, Start
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import SLUG, make_app, plant_project, results_into

VM = vm_name(SLUG)


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    yield runtime
    runtime.close()


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("0.0.0.0", 0))  # on every address: 127.0.0.1 cannot take it either
        listener.listen()
        yield int(listener.getsockname()[1])


def test_a_chosen_host_port_in_use_is_named_before_the_vm_starts(listening: int) -> None:
    with pytest.raises(UsageError) as caught:
        refuse_busy_host_ports([PublishedPort(3000), PublishedPort(80, listening)], "flag --publish")
    assert caught.value.message == (f"host port {listening} (port '{listening}:80', flag --publish) is already in use "
                                    "on 127.0.0.1")
    assert caught.value.hint is not None and "write only the guest port (80)" in caught.value.hint
    refuse_busy_host_ports([PublishedPort(listening)], "")  # a guest port alone gets a free host port


def test_a_free_chosen_host_port_passes(listening: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    refuse_busy_host_ports([PublishedPort(80, free)], "")


def test_the_running_vm_s_ports_are_listed_as_a_table_and_as_json(fake: FakeRuntime, tmp_path: Path) -> None:
    plant_project(fake, SLUG, volume_time=datetime.now(UTC), status=SandboxStatus.RUNNING)
    spec = fake.sandboxes[VM].spec
    assert spec is not None
    fake.stop_sandbox(VM)
    fake.sandboxes[VM].spec = spec._replace(published_ports=(4096, 3000))
    fake.start_sandbox(VM)
    name, ports = project_ports(make_app(fake, tmp_path))
    assert name == VM and ports is not None and sorted(ports) == [3000, 4096]
    table = render_ports(name, ports, "table").splitlines()
    assert table[0].split() == ["GUEST", "PORT", "HOST", "URL", "WHAT"]
    assert table[1].split() == ["3000", f"127.0.0.1:{ports[3000]}", f"http://127.0.0.1:{ports[3000]}"]
    assert table[2].split() == ["4096", f"127.0.0.1:{ports[4096]}", f"http://127.0.0.1:{ports[4096]}", "opencode",
                                "serve"]
    assert json.loads(render_ports(name, ports, "json"))["result"][0] == {
        "guest_port": 3000, "host_address": "127.0.0.1", "host_port": ports[3000],
        "url": f"http://127.0.0.1:{ports[3000]}", "what": ""}


def test_a_stopped_vm_says_so_and_a_missing_one_says_how_to_start(fake: FakeRuntime, tmp_path: Path) -> None:
    app = make_app(fake, tmp_path)
    with pytest.raises(UsageError) as caught:
        project_ports(app)
    assert caught.value.message == f"this project has no VM ({VM}), so no port is published"
    plant_project(fake, SLUG, volume_time=datetime.now(UTC))
    name, ports = project_ports(app)
    assert ports is None
    assert render_ports(name, ports, "table").startswith(f"{VM} is stopped: its ports are published only while")
    assert json.loads(render_ports(name, ports, "json"))["result"] == []


def test_serve_only_prints_the_published_ports_beside_the_daemon_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ready = ReadyVm(VM, "http://127.0.0.1:40000", "password", ports={4096: 40000, 5173: 40001, 3000: 8080})

    def prepare(self: Any, *args: Any) -> ReadyVm:
        return ready

    monkeypatch.setattr(Start, "prepare", prepare)
    monkeypatch.setattr(clients, "_hand_to_reaper", lambda app, ready, leaving=False: None)
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    lines: list[str] = []
    try:
        assert clients.run_attached(results_into(make_app(runtime, tmp_path), lines), False, None, True, (),
                                    lambda: None) == 0
    finally:
        runtime.close()
    assert lines[0] == "URL:      http://127.0.0.1:40000"
    assert lines[3:] == ["port:     http://127.0.0.1:8080 (guest port 3000)",
                         "port:     http://127.0.0.1:40001 (guest port 5173)"]
