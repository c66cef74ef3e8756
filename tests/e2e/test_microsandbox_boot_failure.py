"""A microVM that really does not boot (given too little memory, msb's VMM gives up): the error
keeps msb's cause, the lifecycle tries once more and then leaves neither the VM nor the home
volume it made for it behind."""

from __future__ import annotations

import io
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core.naming import runner_image, vm_name
from opencode_sandbox.errors import VmDidNotBoot
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.project import Project
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import MsbCli
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services.image_step import ReadyImage, UpdateCheck
from opencode_sandbox.services.start import pipeline as run
from opencode_sandbox.services.start.pipeline import Start
from opencode_sandbox.ui.console import Console, LogLevel
from tests.e2e.conftest import MICROVMS_ONLY

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]

TOO_LITTLE_MIB = 24
"""Below what the guest kernel needs: msb's VMM panics with "Kernel doesn't fit in RAM"."""
DOCKERFILE = "FROM debian:trixie-slim\nRUN useradd -m -u 1000 -s /bin/sh dev && echo kept > /home/dev/mark\nUSER dev\n"


def slug_of_image(reference: str) -> str:
    return reference.split("runner-", 1)[1].split(":", 1)[0]


@pytest.fixture
def loaded_image(unique: str, tmp_path: Path) -> Iterator[ReadyImage]:
    reference = runner_image(f"boot-{unique}abc", "c0ffee")
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "Dockerfile").write_text(DOCKERFILE)
    subprocess.run(["docker", "build", "-q", "-t", reference, str(tmp_path / "image")], check=True,
                   capture_output=True)
    try:
        loaded = MicrosandboxRuntime().load_image(reference)
        yield ReadyImage(reference, loaded.digest, {}, None, built=False)
    finally:
        subprocess.run(["docker", "rmi", "-f", reference], capture_output=True, check=False)


def test_a_vm_that_does_not_boot_is_tried_twice_and_leaves_nothing(
    loaded_image: ReadyImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slug = slug_of_image(loaded_image.reference)
    root = tmp_path / "checkout"
    root.mkdir()
    settings = load_settings([], {}, {})._replace(runtime=RuntimeKind.MICROSANDBOX,
                                                   memory=TOO_LITTLE_MIB * 1024 * 1024, cpus=1)
    console = Console(LogLevel.INFO, stream=io.StringIO())
    runtime = MicrosandboxRuntime()
    app = App(console, ToolPaths.from_environment(), Project(slug=slug, root=root, remote=None, is_git=False),
              settings, False, False, runtime, DockerRuntime())
    monkeypatch.setattr(run, "ensure_image", lambda app, rebuild, upgrade_to, agent_upgrade_to=None: loaded_image)
    monkeypatch.setattr(UpdateCheck, "start", lambda self: None)
    monkeypatch.setattr(Start, "_auto_prune", lambda self: None)

    with pytest.raises(VmDidNotBoot) as raised:
        Start(app).prepare(False, 0, wait_for_daemon=False)

    message = raised.value.message
    print(message, console.stream.getvalue(), sep="\n")  # the lab's record of the real text
    assert message.startswith(f"sandbox {vm_name(slug)} could not boot: failed to start")
    assert "before agent relay became available" in raised.value.cause
    assert "msb panicked: Kernel doesn't fit in RAM" in message  # read before msb removed its log
    assert console.stream.getvalue().count("trying once more") == 1
    assert MsbCli().json(["list"]) == []
    assert runtime.list_volumes() == []
    assert app.state.load(slug).home_volume is None
