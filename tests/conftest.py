"""Every test runs with its own HOME, XDG folders and MSB_HOME, and none of the user's settings.

Two settings pass through, both for a slow host (the emulated KVM lab):
`OPENCODE_SANDBOX_DAEMON_START_TIMEOUT`, the allowance `opencode serve` gets to come up, and
`OPENCODE_SANDBOX_CPUS`, the VMs' virtual CPUs (no more than the host has); they change how fast
a test runs or how long it waits, never what it checks."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.common import let_interrupts_reach_children

from tests.fixtures import listening

pytest_plugins = ["tests.fixtures.images", "tests.fixtures.host_users", "tests.fixtures.msb_store"]

let_interrupts_reach_children()  # the suite may have been started in the background

PASSED_THROUGH = {name: os.environ[name] for name in ("OPENCODE_SANDBOX_DAEMON_START_TIMEOUT", "OPENCODE_SANDBOX_CPUS")
                  if name in os.environ}


BUILDING_FIXTURES = frozenset({"runner_base_image", "runner_base_dind_image", "docker_contract_image",
                               "docker_spare_image"})
"""Fixtures that build images in the Docker engine: a test that uses one, even through another
fixture, needs the engine whatever its module's marks say."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marked before `-m` selects, so `-m "not docker"` never builds an image."""
    for item in items:
        if BUILDING_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)


_REPORTED_WAITING: set[int] = set()


@pytest.fixture(autouse=True)
def no_thread_left_waiting_on_a_closed_socket() -> Iterator[None]:
    """A test whose server closed its socket while a thread still waited in `accept` fails: that
    thread would take a connection of a later test's server (`tests/fixtures/listening.py`)."""
    yield
    left = listening.left_waiting(_REPORTED_WAITING)
    _REPORTED_WAITING.update(left)
    if left:
        pytest.fail(f"threads left waiting in accept on a closed socket: {sorted(left.values())}; "
                    "end them with tests.fixtures.listening.AcceptLoop")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for variable, folder in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_DATA_HOME", ".local/share"),
    ):
        path = home / folder
        path.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(variable, str(path))
    # msb puts unix sockets under MSB_HOME, whose paths may not exceed 107 bytes: a short folder
    # of its own, not one deep in pytest's temporary tree (deeper still under xdist).
    msb_home = Path(tempfile.mkdtemp(prefix="msb-"))
    monkeypatch.setenv("MSB_HOME", str(msb_home))
    for name in list(os.environ):
        if name.startswith("OPENCODE_SANDBOX_") and name not in PASSED_THROUGH:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    try:
        yield home
    finally:
        shutil.rmtree(msb_home, ignore_errors=True)


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """Code that readies its process for a long life switches the collector on and freezes
    what is loaded; the test process gets its own state back."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.fixture
def unique() -> str:
    """A short unique token for names of artifacts a test creates."""
    return "t" + uuid.uuid4().hex[:10]
