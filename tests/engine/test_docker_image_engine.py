"""The Docker adapter against the real engine, through its socket and through the command."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.engine.docker import DockerImageEngine
from opencode_sandbox.errors import RuntimeUnavailable, SandboxError
from tests.engine.contract import BASE, LABEL, ImageEngineContract

pytestmark = pytest.mark.docker


def _our_images(unique: str) -> list[str]:
    listed = subprocess.run(["docker", "image", "ls", "--all", "--quiet", "--no-trunc", "--filter",
                             f"label={LABEL}={unique}"], capture_output=True, text=True, check=False)
    return sorted(set(listed.stdout.split()))


@pytest.fixture
def unique() -> Iterator[str]:
    token = uuid.uuid4().hex[:12]
    yield token
    images = _our_images(token)
    if images:
        subprocess.run(["docker", "image", "rm", "--force", *images], capture_output=True, check=False)


@pytest.fixture(params=["socket", "command"])
def engine(request: pytest.FixtureRequest) -> DockerImageEngine:
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{BASE} is not in the local Docker engine")
    cli = DockerCli()
    if request.param == "command":
        cli.give_up_socket()
    elif cli.socket_api() is None:
        pytest.skip("the engine has no plain local socket here")
    return DockerImageEngine(cli)


class TestDockerImageEngine(ImageEngineContract):
    pass


class RecordingCli(DockerCli):
    def __init__(self) -> None:
        super().__init__()
        self.commands: list[list[str]] = []

    def command(self, args: Sequence[str]) -> list[str]:
        self.commands.append(list(args))
        return super().command(args)


def _read(engine: DockerImageEngine, size: int) -> None:
    with engine.export_path(BASE, "/usr/lib") as archive:
        archive.read(size)


@pytest.mark.parametrize("read_to_the_end", [True, False])
def test_reading_a_folder_of_an_image_leaves_no_container(read_to_the_end: bool) -> None:
    """Also when the reader stops early (a folder larger than a pipe holds), which the copy reports."""
    cli = RecordingCli()
    if read_to_the_end:
        _read(DockerImageEngine(cli), -1)
    else:
        with pytest.raises(SandboxError, match="cannot copy /usr/lib"):
            _read(DockerImageEngine(cli), 10)
    created = [args[args.index("--name") + 1] for args in cli.commands if args[0] == "create"]
    assert len(created) == 1
    assert created[0].startswith("opencode-sandbox-fill-")
    left = subprocess.run(["docker", "container", "inspect", created[0]], capture_output=True, check=False)
    assert left.returncode != 0


def test_an_engine_that_does_not_answer_names_the_reason(tmp_path: Path) -> None:
    absent = DockerCli(env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/absent.sock"})
    with pytest.raises(RuntimeUnavailable, match=r"the Docker engine is not reachable: .*absent\.sock") as raised:
        DockerImageEngine(absent).engine_version()
    assert "systemctl start docker" in (raised.value.hint or "")
    with pytest.raises(RuntimeUnavailable, match="the docker command is not installed"):
        DockerImageEngine(DockerCli("docker-" + uuid.uuid4().hex)).engine_version()
