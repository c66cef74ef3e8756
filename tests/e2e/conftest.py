from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from opencode_sandbox.core.naming import BASE_IMAGE
from opencode_sandbox.images.builder import ensure_base_image
from opencode_sandbox.images.progress import SilentProgress
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.runtime.microsandbox.kvm import probe_kvm
from tests.e2e.harness import Project, docker, make_project, project_on
from tests.fixtures.host_users import HostUser
from tests.fixtures.images import RunnerBase
from tests.fixtures.msb_store import MsbImageStore, seeded_msb_home

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here boots VMs or containers: `-m "not docker"` leaves them all out. (A
    `pytestmark` in a conftest applies to nothing.)"""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.docker)
            item.add_marker(pytest.mark.e2e)

_kvm = probe_kvm()
MICROVMS_CANNOT_BOOT = f"microVMs cannot boot here: {_kvm.cause}"
MICROVMS_ONLY = [pytest.mark.kvm, pytest.mark.msb, pytest.mark.skipif(not _kvm.ok, reason=MICROVMS_CANNOT_BOOT)]
"""The marks of a test that needs a booting microVM."""
BOTH_RUNTIMES = ["docker", pytest.param("microsandbox", marks=MICROVMS_ONLY)]
SEED_TAG = "opencode-sandbox-test/seed-runner-base:session"
"""The base image's layers in every microsandbox project's MSB_HOME, under a name no command of the
tool lists or removes."""


def seed_runner_layers(store: MsbImageStore, base: RunnerBase) -> None:
    """Seeds the test's MSB_HOME with the runner base image's layers (not the image itself): a
    project's image still loads for real, but only its own layers are new to msb."""
    store.load(base.result.reference, SEED_TAG)
    seeded_msb_home(store)

MODEL_CA_BASE_TAG = "opencode-sandbox-test/runner-base-model-ca:session"
"""The base image built with the session's model CA, under a name no command of the tool lists or
removes: removing a project's images removes the untagged images below them, and with them the
layers a later build would find in Docker's build cache."""


@pytest.fixture(scope="session")
def session_model_ca() -> Iterator[trustme.CA]:
    """One CA for every scripted model of the session that a user's configuration trusts. A start
    that trusts it builds the base image with it once (node and opencode included, about 25 s); each
    later start finds those layers in Docker's build cache."""
    yield trustme.CA()
    docker("image", "rm", MODEL_CA_BASE_TAG)


@pytest.fixture
def model_ca(session_model_ca: trustme.CA, runner_base_image: RunnerBase) -> Iterator[trustme.CA]:
    """The session's model CA; afterwards the session's base image as it was. A start that trusts the
    CA builds the base image with it too, and the tests after this one expect it without: the image
    with the CA is kept under `MODEL_CA_BASE_TAG`, and the base image is built (from the cache) as the
    session had it."""
    yield session_model_ca
    current = docker("image", "inspect", "--format", "{{.Id}}", BASE_IMAGE).stdout.strip()
    if current and current != runner_base_image.result.image_id:
        docker("image", "tag", BASE_IMAGE, MODEL_CA_BASE_TAG, check=True)
    ensure_base_image(dind=False, opencode_version=runner_base_image.opencode_version, trust_host_ca=True,
                      progress=SilentProgress())


@pytest.fixture
def project(tmp_path: Path, unique: str, runner_base_image: RunnerBase,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh git project on the docker runtime, with the session's base image."""
    created = project_on("docker", tmp_path / f"checkout {unique} ünï", unique, runner_base_image.opencode_version,
                         monkeypatch)
    try:
        yield created
    finally:
        created.cleanup()


@pytest.fixture(params=["root or the test's user", "uid 1001"])
def any_user_project(request: pytest.FixtureRequest, tmp_path: Path, unique: str, runner_base_image: RunnerBase,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh git project on the docker runtime, run by the test's own user, then by uid 1001."""
    if request.param == "uid 1001":
        user: HostUser = request.getfixturevalue("other_host_user")
        created = make_project(tmp_path / f"checkout {unique}", unique, user)
        assert created.home is not None
        record_baked_version(created.paths.state_dir, runner_base_image.opencode_version)
        user.give(created.home)
        created.env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h")
        try:
            yield created
        finally:
            created.cleanup()
        return
    yield request.getfixturevalue("project")


@pytest.fixture(params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """The runtime a scenario that behaves the same on both runs on."""
    return str(request.param)


@pytest.fixture
def msb_project(request: pytest.FixtureRequest, tmp_path: Path, unique: str, runner_base_image: RunnerBase,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh git project on the microsandbox runtime, with the session's base image."""
    seed_runner_layers(request.getfixturevalue("msb_image_store"), runner_base_image)
    created = project_on("microsandbox", tmp_path / f"checkout {unique}", unique,
                         runner_base_image.opencode_version, monkeypatch)
    try:
        yield created
    finally:
        created.cleanup()


@pytest.fixture
def runtime_project(request: pytest.FixtureRequest, runtime: str, tmp_path: Path, unique: str,
                    runner_base_image: RunnerBase, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh git project on `runtime`, run by the test's own user, with the session's base image."""
    if runtime == "microsandbox":
        seed_runner_layers(request.getfixturevalue("msb_image_store"), runner_base_image)
    created = project_on(runtime, tmp_path / f"checkout {unique} ünï", unique, runner_base_image.opencode_version,
                         monkeypatch)
    try:
        yield created
    finally:
        created.cleanup()


@pytest.fixture
def host_datagrams() -> Iterator[tuple[int, list[bytes]]]:
    """A UDP service on every address of the host that answers each datagram: its port, and what it got."""
    import socket
    import threading

    got: list[bytes] = []
    service = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    service.bind(("0.0.0.0", 0))
    service.settimeout(0.5)
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            try:
                data, sender = service.recvfrom(2048)
            except TimeoutError:
                continue
            got.append(data)
            service.sendto(b"answer", sender)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield service.getsockname()[1], got
    finally:
        done.set()
        thread.join()
        service.close()
