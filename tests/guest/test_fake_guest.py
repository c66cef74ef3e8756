"""The guest contract, held by the fake operations on the fake runtime."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opencode_sandbox.core.dev_home import BlockedFolder, HomeProbe
from opencode_sandbox.core.naming import home_volume_name, managed_labels, runner_image, vm_name
from opencode_sandbox.runtime.types import ExecResult, Mount, MountKind, SandboxSpec
from tests.fakes.runtime import FakeRuntime
from tests.guest.contract import Booted, GuestContract

SLUG = "guest-0123456789abcd"


class TestFakeGuest(GuestContract):
    @pytest.fixture
    def booted(self) -> Iterator[Booted]:
        runtime = FakeRuntime()
        image = runner_image(SLUG, "0" * 12)
        runtime.add_docker_image(image)
        runtime.load_image(image)
        volume = home_volume_name(SLUG)
        runtime.create_volume(volume, managed_labels(SLUG))
        runtime.fill_volume_from_image(volume, image)
        vm = vm_name(SLUG)
        runtime.create_sandbox(SandboxSpec(vm, image, 1, 512, labels=managed_labels(SLUG),
                                           mounts=(Mount(MountKind.VOLUME, volume, "/home/dev"),)))
        try:
            yield Booted(runtime, runtime.guests(runtime, vm))
        finally:
            runtime.close()


def test_a_scripted_probe_and_a_scripted_failure_stand_for_the_vms_own() -> None:
    """What tests script in place of a home that cannot be used, or an unpack that fails."""
    runtime = FakeRuntime()
    try:
        image = runner_image(SLUG, "0" * 12)
        runtime.add_docker_image(image)
        runtime.load_image(image)
        vm = vm_name(SLUG)
        runtime.create_sandbox(SandboxSpec(vm, image, 1, 512, labels=managed_labels(SLUG)))
        guest = runtime.guests(runtime, vm)
        blocked = HomeProbe((1000, 1000), "/usr/local/bin/opencode", BlockedFolder("/home/dev", (0, 0), "755"))
        runtime.guests.probes[vm] = blocked
        runtime.guests.unpack_failure = ExecResult(2, "", "tar: cannot write")
        assert guest.probe_home() == blocked
        assert guest.unpack_home(b"").exit_code == 2
        assert runtime.guests.unpacked[vm] == [b""]
    finally:
        runtime.close()
