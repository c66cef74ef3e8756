"""The guest contract, held by the shell operations in a container of the session's runner base image."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from opencode_sandbox.core.naming import home_volume_name, managed_labels, vm_name
from opencode_sandbox.errors import NotFound
from opencode_sandbox.guest.shell import ShellGuest
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
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
