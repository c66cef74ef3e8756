"""`doctor`'s check of dev's home in the project's VM, over the fake runtime."""

from __future__ import annotations

import io

import pytest

from opencode_sandbox.cli.render import render_report
from opencode_sandbox.core.dev_home import BlockedFolder, HomeProbe
from opencode_sandbox.core.naming import managed_labels, runner_image, vm_name
from opencode_sandbox.guest.operations import Guest
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.types import SandboxSpec
from opencode_sandbox.services.doctor import Check, DoctorReport, check_project_home
from opencode_sandbox.ui.console import Console, LogLevel
from tests.fakes.runtime import FakeRuntime

SLUG = "demo-0123456789abcd"
VM = vm_name(SLUG)
VOLUME = "opencode-sandbox-home-demo-0123456789abcd-20300101000000"
USABLE = HomeProbe((1001, 1001), "/usr/local/bin/opencode", None)
FOREIGN = USABLE._replace(blocked=BlockedFolder("/home/dev", (1000, 1000), "700"))


def runtime_with_vm() -> FakeRuntime:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    image = runner_image(SLUG, "0" * 12)
    runtime.add_docker_image(image)
    runtime.create_sandbox(SandboxSpec(VM, image, 1, 512, labels=managed_labels(SLUG)))
    return runtime


def answer_probe(runtime: FakeRuntime, probe: HomeProbe | None) -> None:
    """What the probe of dev's home finds in the VM."""
    runtime.guests.probes[VM] = probe


def guest(runtime: FakeRuntime) -> Guest:
    return runtime.guests(runtime, VM)


def test_no_vm_means_nothing_to_check() -> None:
    assert check_project_home(FakeRuntime(RuntimeKind.DOCKER), guest(FakeRuntime(RuntimeKind.DOCKER)), None) is None


def test_a_stopped_vm_is_not_started_to_be_checked() -> None:
    runtime = runtime_with_vm()
    runtime.stop_sandbox(VM)
    answer_probe(runtime, FOREIGN)
    check = check_project_home(runtime, guest(runtime), VOLUME)
    assert check == Check("home", True, f"not checked: {VM} is stopped (checked while it runs)",
                          required_for=frozenset({RuntimeKind.DOCKER}), of_project=True)
    assert ("probe_home", VM) not in runtime.calls
    assert ("start_sandbox", VM) not in runtime.calls


def test_a_usable_home_passes() -> None:
    runtime = runtime_with_vm()
    answer_probe(runtime, USABLE)
    check = check_project_home(runtime, guest(runtime), VOLUME)
    assert check is not None and check.ok
    assert check.detail == f"dev (uid 1001, gid 1001) can use its home in {VM}"
    assert runtime.calls.count(("probe_home", VM)) == 1


def test_a_home_of_another_owner_fails_with_the_fix() -> None:
    runtime = runtime_with_vm()
    answer_probe(runtime, FOREIGN)
    check = check_project_home(runtime, guest(runtime), VOLUME)
    assert check is not None and not check.ok
    assert check.detail == (f"in {VM}: dev cannot write its home: /home/dev belongs to uid 1000, gid 1000 "
                            "(mode 700) and dev is uid 1001, gid 1001")
    assert check.fix is not None and VOLUME in check.fix and "volume migrate" in check.fix
    report = DoctorReport(RuntimeKind.DOCKER, (check,))
    assert report.failures == [check]


def test_a_vm_that_cannot_be_asked_only_warns() -> None:
    runtime = runtime_with_vm()
    answer_probe(runtime, None)
    check = check_project_home(runtime, guest(runtime), VOLUME)
    assert check is not None and not check.ok
    assert DoctorReport(RuntimeKind.DOCKER, (check,)).failures == []


@pytest.mark.parametrize(("host_ok", "verdict"), [
    (True, "The docker runtime can work on this host.\n"),
    (False, ""),
])
def test_the_verdict_tells_a_project_failure_from_a_host_failure(host_ok: bool, verdict: str) -> None:
    runtime = runtime_with_vm()
    answer_probe(runtime, FOREIGN)
    home = check_project_home(runtime, guest(runtime), VOLUME)
    assert home is not None
    report = DoctorReport(RuntimeKind.DOCKER, (Check("docker", host_ok, "engine"), home))
    out, errors = io.StringIO(), io.StringIO()
    render_report(report, Console(LogLevel.INFO, stream=errors, out=out))
    assert out.getvalue().endswith(verdict)
    if host_ok:
        assert "error: this project's VM cannot work as it is (home)" in errors.getvalue()
    else:
        assert "error: the docker runtime cannot work on this host (docker)" in errors.getvalue()
