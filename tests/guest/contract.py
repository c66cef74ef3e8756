"""What every implementation of the guest operations promises, as a test base class.

A test module subclasses `GuestContract` and provides the fixture `booted`: a running VM with a
home volume at /home/dev filled from an image that has opencode on dev's PATH, as a `Booted`.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass

import pytest

from opencode_sandbox.core.agent_activity import AgentReport
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.guest.operations import Guest
from opencode_sandbox.guest.places import EMPTY_LOG
from opencode_sandbox.runtime.base import Runtime

CONFIG = ".config/opencode/opencode.json"


@dataclass
class Booted:
    runtime: Runtime
    guest: Guest


def archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size, member.mode = len(data), 0o600
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def read_home(booted: Booted, path: str) -> str:
    result = booted.runtime.exec(booted.guest.vm, ["cat", f"/home/dev/{path}"], workdir="/")
    assert result.exit_code == 0, result.stderr
    return result.stdout


class GuestContract:
    def test_a_new_vm_runs_no_server_and_its_log_is_empty(self, booted: Booted) -> None:
        assert booted.guest.server_running() is False
        assert booted.guest.server_log() == EMPTY_LOG

    def test_a_started_server_runs_until_it_is_stopped(self, booted: Booted) -> None:
        started = booted.guest.start_server("contract-password")
        assert started.exit_code == 0, started.stderr
        assert booted.guest.server_running() is True
        booted.guest.stop_server()
        assert booted.guest.server_running() is False
        booted.guest.stop_server()  # nothing to stop is no failure

    def test_a_server_ends_with_the_boot_it_started_in(self, booted: Booted) -> None:
        assert booted.guest.start_server("contract-password").exit_code == 0
        booted.runtime.stop_sandbox(booted.guest.vm)
        booted.runtime.start_sandbox(booted.guest.vm)
        assert booted.guest.server_running() is False

    def test_the_probe_finds_dev_at_home_with_opencode_on_its_path(self, booted: Booted) -> None:
        probe = booted.guest.probe_home()
        assert probe is not None and probe.dev is not None
        assert probe.opencode.endswith("/opencode")
        assert probe.blocked is None

    def test_the_probe_names_the_first_folder_dev_cannot_write(self, booted: Booted) -> None:
        vm = booted.guest.vm
        for argv in (["mkdir", "-p", "/home/dev/.config/opencode"], ["chmod", "500", "/home/dev/.config"]):
            result = booted.runtime.exec(vm, argv, workdir="/")
            assert result.exit_code == 0, result.stderr
        probe = booted.guest.probe_home()
        assert probe is not None and probe.blocked is not None
        assert (probe.blocked.path, probe.blocked.mode, probe.blocked.owner) == ("/home/dev/.config", "500", probe.dev)

    def test_an_archive_is_unpacked_into_devs_home(self, booted: Booted) -> None:
        unpacked = booted.guest.unpack_home(archive({CONFIG: b'{"theme": "dark"}\n'}))
        assert unpacked.exit_code == 0, unpacked.stderr
        assert read_home(booted, CONFIG) == '{"theme": "dark"}\n'

    def test_a_stopped_vm_cannot_be_asked(self, booted: Booted) -> None:
        booted.runtime.stop_sandbox(booted.guest.vm)
        with pytest.raises(SandboxError):
            booted.guest.server_running()
        with pytest.raises(SandboxError):
            booted.guest.start_server("contract-password")
        assert booted.guest.probe_home() is None

    def test_a_new_vm_runs_no_agent_session_and_reports_no_state(self, booted: Booted) -> None:
        assert booted.guest.agent_report() == AgentReport(False)

    def test_a_stopped_vm_cannot_report_its_agent(self, booted: Booted) -> None:
        booted.runtime.stop_sandbox(booted.guest.vm)
        with pytest.raises(SandboxError):
            booted.guest.agent_report()
