"""Whether msb can run, on a scripted msb: a start's runtime check runs no msb process, and a
missing or broken msb still says what to do next."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import RuntimeUnavailable
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import MsbCli
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck
from tests.fixtures.scripted_msb import ScriptedMsb, answer

NAME = vm_name("available-0123456789abcd")


def runtime_of(scripted: ScriptedMsb) -> MicrosandboxRuntime:
    return MicrosandboxRuntime(cli=scripted.cli, kvm_probe=lambda: KvmCheck(True))


def test_checking_the_runtime_runs_no_msb(tmp_path: Path) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {})
    runtime_of(scripted).check_available()
    assert scripted.calls == []


def test_a_missing_msb_says_to_reinstall(tmp_path: Path) -> None:
    runtime = MicrosandboxRuntime(cli=MsbCli(tmp_path / "no-msb"), kvm_probe=lambda: KvmCheck(True))
    with pytest.raises(RuntimeUnavailable) as raised:
        runtime.check_available()
    assert raised.value.message == f"msb not found at {tmp_path / 'no-msb'}"
    assert raised.value.hint is not None and "reinstall" in raised.value.hint


def test_an_msb_that_cannot_run_says_to_reinstall(tmp_path: Path) -> None:
    binary = tmp_path / "msb"
    binary.write_bytes(b"\x7fELF not for this host")
    binary.chmod(0o644)
    runtime = MicrosandboxRuntime(cli=MsbCli(binary), kvm_probe=lambda: KvmCheck(True))
    with pytest.raises(RuntimeUnavailable) as unavailable:
        runtime.check_available()
    assert unavailable.value.message == f"msb at {binary} is not executable"
    binary.chmod(0o755)
    with pytest.raises(RuntimeUnavailable) as raised:
        runtime.get_sandbox(NAME)
    assert raised.value.message.startswith(f"msb at {binary} cannot run: ")
    assert raised.value.hint is not None and "reinstall" in raised.value.hint


def test_a_broken_msb_is_told_apart_from_a_failed_call(tmp_path: Path) -> None:
    """Only a call that fails asks msb for its version: a broken msb gets the reinstall hint."""
    failing = answer(stderr="error: database is locked\n", code=1)
    broken = ScriptedMsb.at(tmp_path / "broken", {"inspect": [failing],
                                                  "--version": [answer(stderr="error: cannot load libkrunfw\n",
                                                                       code=1)]})
    with pytest.raises(RuntimeUnavailable) as raised:
        runtime_of(broken).get_sandbox(NAME)
    assert raised.value.message == "msb does not answer: cannot load libkrunfw"
    assert raised.value.hint is not None and "reinstall" in raised.value.hint
    working = ScriptedMsb.at(tmp_path / "working", {"inspect": [failing], "--version": [answer("msb 0.7.11\n")]})
    with pytest.raises(RuntimeUnavailable) as failed:
        runtime_of(working).get_sandbox(NAME)
    assert failed.value.message == f"msb inspect {NAME} failed: database is locked"
    assert failed.value.hint == "run `msb doctor` to check the runtime"
    assert working.subcommands() == ["inspect", "--version"]


def test_msb_run_by_root_starts_without_the_capabilities_that_would_reach_host_files() -> None:
    """msb's file server writes every extended attribute the VM sets through to the host file: run
    by root with CAP_SETFCAP, root in the VM would give a host file capabilities."""
    import os
    import subprocess

    from opencode_sandbox.runtime.microsandbox import cli

    prefix = cli.without_host_privileges()
    if os.geteuid() != 0:
        assert prefix == []
        return
    assert prefix[1:3] == ["--bounding-set", "-setfcap,-sys_admin,-mknod,-fsetid,-linux_immutable"]
    status = subprocess.run([*prefix, "grep", "CapBnd", "/proc/self/status"], capture_output=True, text=True,
                            check=True).stdout
    bounding = int(status.split()[1], 16)
    assert not bounding >> 31 & 1 and not bounding >> 21 & 1
