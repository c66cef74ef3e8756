"""Clients on either runtime, in one scenario: `run --serve-only` guards the daemon with its
password on 127.0.0.1 only, the attached opencode interface renders on a real terminal beside
it, and the VM stops by itself once the last of them has left. The same without internet: on
docker under the `none` profile, and on a microVM in the lab's `--offline` guest (no route out,
no resolver), where the default profile meets no network at all."""

from __future__ import annotations

import re
import time

import pytest

from opencode_sandbox.runtime.docker.network_holder import holder_name
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import (
    Project,
    ServeOnly,
    Tmux,
    cli_command,
    connects,
    docker,
    host_processes,
    non_loopback_address,
    status_of,
    wait_until,
)

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(2400)]

ATTACHED_SCREEN = r"(?i)ask anything|ctrl\+p|tab\s+agents|esc\s+interrupt"
IDLE_TIMEOUT_S = 2
# The emulated lab runs 20 to 30 times slower than a real host: the reaper's polls and the stop
# itself take that much longer there.
STOP_SLACK_S = 300


@pytest.mark.parametrize(("runtime", "network"), [
    ("docker", "public"), ("docker", "none"), pytest.param("microsandbox", "public", marks=MICROVMS_ONLY)])
def test_serve_only_and_attach_then_the_vm_stops_after_the_last_client(
    runtime_project: Project, network: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = runtime_project
    monkeypatch.setenv("OPENCODE_SANDBOX_NETWORK", network)
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", f"{IDLE_TIMEOUT_S}s")
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_ON_ACTIVE_SESSIONS", "false")
    served = ServeOnly(project)
    terminal: Tmux | None = None
    try:
        found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", served.url)
        assert found, served.url
        health = served.url + "/global/health"
        assert status_of(health, None) == 401
        assert status_of(served.url + "/session", None) == 401
        assert status_of(health, served.password[::-1]) == 401
        assert status_of(health, served.password) == 200
        elsewhere = non_loopback_address()
        if elsewhere is not None:
            assert not connects(elsewhere, int(found.group(1))), f"the daemon answers on {elsewhere}"
        assert (project.state_dir / "daemon-password").stat().st_mode & 0o777 == 0o600
        if project.runtime == "docker":
            ports = docker("port", holder_name(project.slug)).stdout  # published by the VM's network holder
            assert ports.strip() and all("127.0.0.1:" in line for line in ports.splitlines())

        terminal = Tmux(f"osb-attach-{unique}", cli_command(), project.root, project.env)
        attaching = time.monotonic()
        try:
            screen = terminal.wait_for(ATTACHED_SCREEN, timeout=900)
        except AssertionError as missing:
            raise AssertionError(f"{missing}\nafter {time.monotonic() - attaching:.0f} s, on this host:\n"
                                 f"{host_processes('opencode', 'msb')}\nthe VM shows:\n{project.vm_report()}") from None
        assert "error:" not in screen
        assert len(list((project.state_dir / "leases").glob("*.lease"))) == 2
        time.sleep(3 * IDLE_TIMEOUT_S)
        assert project.vm_running(), "the VM must stay up while clients are attached"

        terminal.close()
        terminal = None
        time.sleep(3 * IDLE_TIMEOUT_S)
        assert project.vm_running(), "the serve-only client still holds the VM"
        detached = time.monotonic()
        served.detach()
        if not wait_until(project.vm_stopped, timeout=STOP_SLACK_S, interval=2):
            decisions = project.reaper_log()
            raise AssertionError(f"the VM still runs {STOP_SLACK_S} s after the last client left: "
                                 f"{project.vm_info()}\nthe reaper's log:\n{decisions}\non this host:\n"
                                 f"{host_processes('opencode', 'msb')}")
        assert time.monotonic() - detached >= IDLE_TIMEOUT_S
        assert "stopping" in (project.state_dir / "reaper.log").read_text()
    finally:
        if terminal is not None:
            terminal.close()
        served.detach()

    again = project.shell("echo back")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "back\n"
