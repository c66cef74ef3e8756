"""The guest contract, held by the shell operations in a container of the session's runner base image."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, vm_name
from opencode_sandbox.errors import NotFound, SandboxError
from opencode_sandbox.guest.shell import ShellGuest
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import ExecResult, Mount, MountKind, SandboxSpec
from tests.fixtures.images import RunnerBase
from tests.guest.contract import Booted, GuestContract

pytestmark = pytest.mark.docker


class TestShellGuest(GuestContract):
    @pytest.fixture
    def booted(self, runner_base_image: RunnerBase, unique: str) -> Iterator[Booted]:
        runtime = DockerRuntime()
        slug = f"guest-{unique}000"  # a slug ends in 14 letters or digits
        image = runner_base_image.result.reference
        volume = home_volume_name(slug)
        vm = vm_name(slug)
        runtime.create_volume(volume, managed_labels(slug))
        try:
            runtime.fill_volume_from_image(volume, image)
            runtime.create_sandbox(SandboxSpec(vm, image, 1, 512, labels=managed_labels(slug),
                                               mounts=(Mount(MountKind.VOLUME, volume, "/home/dev"),)))
            yield Booted(runtime, ShellGuest(runtime, vm))
        finally:
            with contextlib.suppress(NotFound):
                runtime.remove_sandbox(vm)
            runtime.remove_volume(volume)


def test_the_probe_runs_as_dev_from_the_root_and_gives_up_on_a_vm_it_cannot_ask() -> None:
    """dev's own view of its home, from a folder every user can enter; a VM that cannot be asked
    is no probe, not a failure."""
    calls: list[tuple[str, str]] = []

    class Recording(DockerRuntime):
        def exec(self, name: str, argv: Sequence[str], **options: Any) -> ExecResult:
            calls.append((options.get("user", "dev"), options.get("workdir", "/workspace")))
            raise SandboxError(f"sandbox {name} is not running")

    assert ShellGuest(Recording(), "opencode-sandbox-vm-absent-00000000000000").probe_home() is None
    assert calls == [("dev", "/")]
