"""A microVM that does not boot, on a scripted msb: the cause in msb's log is read before the
sandbox (and with it that log) is removed, kept short and free of the VM's environment, and the
error says whether another attempt may help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.errors import BootFailed, SandboxError, VmDidNotBoot
from opencode_sandbox.runtime.microsandbox import backend as microsandbox_backend
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.boot_log import MAX_LINES, MAX_WIDTH, decisive_lines
from opencode_sandbox.runtime.microsandbox.cli import MsbResult
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from tests.fixtures.scripted_msb import ScriptedMsb, answer, not_found

SLUG = "boot-0123456789abcd"
NAME = vm_name(SLUG)
IMAGE = f"opencode-sandbox/runner-{SLUG}:c0ffee"
SECRET = "s3cret-value-of-the-env"
CREATE_FAILED = (
    f'error: failed to start "{NAME}"\n'
    "  → other: sandbox process exited (exit status: 1) before agent relay became available\n"
    f"  → run `msb logs --source system {NAME}` for full diagnostics\n"
)
MSB_CAUSE = f'failed to start "{NAME}": sandbox process exited (exit status: 1) before agent relay became available'
SYSTEM_LOG = (
    f"INFO microsandbox_runtime::runner::vm: sandbox starting sandbox={NAME}\n"
    f"[    0.000000] Kernel command line: console=hvc0 TOKEN={SECRET}\n"
    "[    1.204311] Out of memory: Killed process 1 (agentd) total-vm:2048kB\n"
    "[    1.204990] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009\n"
    "ERROR msb_krun_vmm::linux::vstate: Received KVM_EXIT_INTERNAL_ERROR signal\n"
    f"WARN microsandbox_runtime::runner::vm: guest wrote {SECRET} to its console\n"
    "INFO msb_krun_vmm: Vmm is stopping.\n"
    "--- sandbox stopped ---\n"
)
INSPECTED = {
    "name": NAME,
    "status": "Stopped",
    "config": {"labels": managed_labels(SLUG), "env": [{"key": "TOKEN", "value": SECRET}]},
}
KVM_OK = KvmCheck(True)
KVM_MISSING = KvmCheck(False, "/dev/kvm does not exist", "load the kvm module")


def spec(workspace: Path) -> SandboxSpec:
    return SandboxSpec(NAME, IMAGE, 1, 512, env={"TOKEN": SECRET}, labels=managed_labels(SLUG),
                       mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),))


def failing_create(folder: Path) -> ScriptedMsb:
    return ScriptedMsb.at(folder, {
        # absent before the create; msb keeps the record of a sandbox that did not boot
        "inspect": [not_found("sandbox"), answer(json.dumps(INSPECTED))],
        "image inspect": [answer(json.dumps({"reference": IMAGE}))],
        "create": [answer(stderr=CREATE_FAILED, code=1)],
        "logs": [answer(SYSTEM_LOG)],
        "remove": [answer()],
    })


def test_a_failed_create_keeps_msb_s_cause_and_log_and_removes_the_sandbox(tmp_path: Path) -> None:
    msb = failing_create(tmp_path / "msb")
    runtime = MicrosandboxRuntime(cli=msb.cli, kvm_probe=lambda: KVM_OK)
    with pytest.raises(VmDidNotBoot) as raised:
        runtime.create_sandbox(spec(tmp_path))
    failure = raised.value
    assert failure.cause == MSB_CAUSE
    lines = failure.message.splitlines()
    assert lines[0] == f"sandbox {NAME} could not boot: {MSB_CAUSE}"
    assert [line.strip() for line in lines[1:]] == [
        "[    1.204311] Out of memory: Killed process 1 (agentd) total-vm:2048kB",
        "[    1.204990] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009",
        "ERROR msb_krun_vmm::linux::vstate: Received KVM_EXIT_INTERNAL_ERROR signal",
    ]
    assert SECRET not in failure.message and SECRET not in (failure.hint or "")
    assert failure.hint is not None and "msb logs" not in failure.hint  # the sandbox and its log are gone
    subcommands = msb.subcommands()
    assert "logs" in subcommands and "remove" in subcommands
    assert subcommands.index("logs") < subcommands.index("remove")


def test_without_usable_kvm_the_failure_says_so_and_is_not_one_to_retry(tmp_path: Path) -> None:
    msb = failing_create(tmp_path / "msb")
    runtime = MicrosandboxRuntime(cli=msb.cli, kvm_probe=lambda: KVM_MISSING)
    with pytest.raises(BootFailed) as raised:
        runtime.create_sandbox(spec(tmp_path))
    assert not isinstance(raised.value, VmDidNotBoot)
    assert "/dev/kvm does not exist" in raised.value.message and MSB_CAUSE in raised.value.message
    assert raised.value.hint is not None and "--runtime docker" in raised.value.hint


def test_a_failed_start_keeps_the_sandbox_and_points_at_its_log(tmp_path: Path) -> None:
    msb = ScriptedMsb.at(tmp_path / "msb", {
        "inspect": [answer(json.dumps(INSPECTED))],
        "start": [answer(stderr="error: agent relay wait_ready failed\n", code=1)],
        "logs": [answer(SYSTEM_LOG)],
    })
    runtime = MicrosandboxRuntime(cli=msb.cli, kvm_probe=lambda: KVM_OK)
    with pytest.raises(VmDidNotBoot) as raised:
        runtime.start_sandbox(NAME)
    assert raised.value.cause == "agent relay wait_ready failed"
    assert "Kernel panic" in raised.value.message
    assert SECRET not in raised.value.message  # the sandbox's own environment, from its record
    assert raised.value.hint is not None and f"msb logs --source system {NAME}" in raised.value.hint
    assert "remove" not in msb.subcommands()


def test_an_image_that_is_not_loaded_fails_before_any_boot(tmp_path: Path) -> None:
    msb = ScriptedMsb.at(tmp_path / "msb", {"inspect": [not_found("sandbox")], "image inspect": [not_found("image")]})
    runtime = MicrosandboxRuntime(cli=msb.cli, kvm_probe=lambda: KVM_OK)
    with pytest.raises(BootFailed) as raised:
        runtime.create_sandbox(spec(tmp_path))
    assert not isinstance(raised.value, VmDidNotBoot)
    assert "create" not in msb.subcommands()


def test_msb_s_causes_join_its_error_line() -> None:
    result = MsbResult(1, "", CREATE_FAILED)
    assert result.error_text == f'failed to start "{NAME}"'
    assert result.failure_text == MSB_CAUSE
    assert MsbResult(1, "", "error: agent relay wait_ready failed\n").failure_text == "agent relay wait_ready failed"


def test_a_panic_of_msb_is_told_by_its_message() -> None:
    """msb's log of a VM given too little memory, as the lab recorded it."""
    log = (
        "INFO microsandbox_runtime::runner::vm: entering VM sandbox=probe-24M\n"
        "thread 'main' (281) panicked at /github/home/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/"
        "msb_krun_arch-0.1.41/src/x86_64/mod.rs:85:25:\n"
        "Kernel doesn't fit in RAM\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
    )
    assert decisive_lines(log) == ["msb panicked: Kernel doesn't fit in RAM"]


def test_only_the_last_boot_counts_and_not_its_harmless_failures() -> None:
    """A VM that booted once (its log as the lab recorded it), then did not start again."""
    log = (
        "INFO microsandbox_runtime::runner::vm: sandbox starting sandbox=probe-512M\n"
        "[    3.955863] rtc_cmos rtc_cmos: probe with driver rtc_cmos failed with error -16\n"
        "--- sandbox started ---\n"
        "ERROR microsandbox_runtime::runner::relay: agent relay: handshake write failed slot=0: Broken pipe\n"
        "--- sandbox stopped ---\n"
        "INFO microsandbox_runtime::runner::vm: sandbox starting sandbox=probe-512M\n"
        "[    3.955863] rtc_cmos rtc_cmos: probe with driver rtc_cmos failed with error -16\n"
        "ERROR microsandbox_runtime::runner::vm: agent relay wait_ready failed\n"
    )
    assert decisive_lines(log) == ["ERROR microsandbox_runtime::runner::vm: agent relay wait_ready failed"]


def test_the_log_excerpt_stays_short() -> None:
    log = "".join(f"ERROR msb: failure number {number} {'x' * 300}\n" for number in range(10))
    lines = decisive_lines(log)
    assert len(lines) == MAX_LINES
    assert all(len(line) <= MAX_WIDTH for line in lines)
    assert lines[-1].startswith("ERROR msb: failure number 9")  # the last ones, in their order
    assert decisive_lines("INFO msb: all is well\n\x1b[31mERROR\x1b[0m msb: boom\n") == ["ERROR msb: boom"]


HANDSHAKE = "handshake: read id range: timed out before relay sent bytes"


def test_an_exec_msb_could_not_deliver_is_an_error_not_the_command_s_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msb = ScriptedMsb.at(tmp_path / "msb", {
        "exec": [
            answer(stderr=f"error: agent client error: {HANDSHAKE}\n", code=1),
            answer(stderr=f"error: agent client error: {HANDSHAKE}\n", code=1),
            answer(stderr="pgrep: no process found\n", code=1),
        ],
    })
    monkeypatch.setattr(microsandbox_backend, "EXEC_HANDSHAKE_RETRY_S", 0.0)
    runtime = MicrosandboxRuntime(cli=msb.cli, kvm_probe=lambda: KVM_OK)
    with pytest.raises(SandboxError) as raised:
        runtime.exec(NAME, ["pgrep", "-f", "opencode serve"])
    assert raised.value.message == (f"cannot run `pgrep` in {NAME}: agent client error: handshake: read id range: "
                                    "timed out before relay sent bytes")
    assert raised.value.hint is not None and "run again" in raised.value.hint
    assert runtime.exec(NAME, ["pgrep", "-f", "opencode serve"]).exit_code == 1  # the command's own status
    assert msb.subcommands().count("exec") == 3  # the undelivered command was tried twice


def test_an_exec_the_agent_was_too_busy_to_take_is_tried_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msb = ScriptedMsb.at(tmp_path / "msb", {
        "exec": [answer(stderr=f"error: agent client error: {HANDSHAKE}\n", code=1), answer("1234\n")],
    })
    monkeypatch.setattr(microsandbox_backend, "EXEC_HANDSHAKE_RETRY_S", 0.0)
    runtime = MicrosandboxRuntime(cli=msb.cli, kvm_probe=lambda: KVM_OK)
    assert runtime.exec(NAME, ["pgrep", "-f", "opencode serve"]) == (0, "1234\n", "")
