"""The main job: the real opencode agent in the VM edits the checkout through its own tools.

A scripted model provider on the host answers the agent's first request with a tool call
that writes a file under /workspace and its next one with a final message. opencode finds
the provider in the user's own opencode configuration, which the tool provisions into the
VM; the prompt goes through the daemon's API, as a client's would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.harness import Project, ServeOnly, docker, wait_until
from tests.fixtures.model_server import ModelServer, Reply, ToolCall, provider_config, step

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

NOTE = "agent-note.txt"
NOTE_TEXT = "written by the agent in the sandbox\n"


def bridge_gateway() -> str:
    """The host's address on Docker's default network: where a container reaches the host."""
    template = '{{range .IPAM.Config}}{{.Gateway}}{{end}} {{index .Options "com.docker.network.bridge.name"}}'
    inspected = docker("network", "inspect", "bridge", "--format", template, check=True).stdout
    gateway, _, interface = inspected.partition(" ")
    if gateway:
        return gateway
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show", interface.strip()], capture_output=True, text=True,
                           check=True).stdout
    address = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", shown)
    assert address, f"no IPv4 address on Docker's bridge {interface.strip()}: {shown}"
    return address.group(1)


def opencode_logs(project: Project) -> str:
    """The end of opencode's own logs in the VM, for a failure's message."""
    script = "tail -n 40 ~/.local/state/opencode-sandbox/daemon.log ~/.local/share/opencode/log/*.log"
    return docker("exec", "--user", "dev", "--env", "HOME=/home/dev", project.vm, "sh", "-c", script).stdout


def use_model(project: Project, base_url: str) -> None:
    """Point the user's own opencode configuration at the scripted model."""
    folder = project.opencode_config_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opencode.json").write_text(json.dumps(provider_config(base_url), indent=2))
    if project.user and project.home:
        project.user.give(project.home / ".config")


def test_the_agent_edits_the_checkout_and_holds_the_vm_while_it_works(any_user_project: Project) -> None:
    project = any_user_project
    project.env["OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT"] = "2s"
    owner = (project.user.uid, project.user.gid) if project.user else (os.getuid(), os.getgid())
    steps = [
        step(ToolCall("write", {"filePath": f"/workspace/{NOTE}", "content": NOTE_TEXT})),
        step(Reply(f"I wrote {NOTE}."), held=True),
    ]
    gateway = bridge_gateway()
    assert gateway
    with ModelServer.start(steps, bind=gateway, advertised_host=gateway) as model:
        # A model served on this host, as a local provider is: under the default network profile
        # the host is out of the VM's reach but for the destinations the user allows.
        project.env["OPENCODE_SANDBOX_EGRESS_ALLOW"] = urlsplit(model.url).netloc
        use_model(project, model.url)
        client = ServeOnly(project)
        with httpx.Client(base_url=client.url, auth=("opencode", client.password), timeout=60) as daemon:
            session = daemon.post("/session", json={"title": "agent at work"}).json()["id"]
            sent = daemon.post(f"/session/{session}/prompt_async",
                               json={"parts": [{"type": "text", "text": f"Write {NOTE} in the checkout."}]})
            assert sent.status_code in (200, 204), sent.text

            assert steps[1].reached.wait(240), (
                f"the agent never came back for its next step: {model.requests}\n{opencode_logs(project)}")
            written = project.root / NOTE
            assert written.read_text() == NOTE_TEXT
            assert (written.stat().st_uid, written.stat().st_gid) == owner
            assert daemon.get("/session/status").json().get(session, {}).get("type") == "busy"

            client.detach()
            time.sleep(10)  # five times the idle timeout
            assert project.container_state() == "running", "a session waiting for its model must hold the VM"

        steps[1].release.set()
        assert wait_until(lambda: project.container_state() == "exited", timeout=120), \
            "the VM must stop once the agent's session is idle"

    tool_rounds = [body for body in model.requests if body.get("tools")]
    assert len(tool_rounds) == 2
    tool_results = [m for m in tool_rounds[1]["messages"] if m.get("role") == "tool"]
    assert tool_results, "the second request carries the write tool's result back to the model"
    log = (project.state_dir / "reaper.log").read_text()
    assert "stopping" in log
    # No desktop here: the turn's end is recorded once for an attached client's bell.
    assert log.count("opencode finished its turn") == 1, log
    assert (project.state_dir / "attention").read_text().strip()


def test_in_the_isolated_workspace_the_agents_edit_reaches_the_checkout_only_through_apply(
        any_user_project: Project) -> None:
    project = any_user_project
    project.env["OPENCODE_SANDBOX_WORKSPACE"] = "isolated"
    steps = [
        step(ToolCall("write", {"filePath": f"/workspace/{NOTE}", "content": NOTE_TEXT})),
        step(Reply(f"I wrote {NOTE}.")),
    ]
    gateway = bridge_gateway()
    with ModelServer.start(steps, bind=gateway, advertised_host=gateway) as model:
        project.env["OPENCODE_SANDBOX_EGRESS_ALLOW"] = urlsplit(model.url).netloc
        use_model(project, model.url)
        client = ServeOnly(project)
        with httpx.Client(base_url=client.url, auth=("opencode", client.password), timeout=60) as daemon:
            session = daemon.post("/session", json={"title": "agent at work"}).json()["id"]
            sent = daemon.post(f"/session/{session}/prompt_async",
                               json={"parts": [{"type": "text", "text": f"Write {NOTE} in the checkout."}]})
            assert sent.status_code in (200, 204), sent.text
            assert steps[1].reached.wait(240), (
                f"the agent never came back for its next step: {model.requests}\n{opencode_logs(project)}")
            written = project.root / NOTE
            assert not written.exists(), "the agent's edit reached the checkout before apply"
            shown = project.cli("diff")
            assert shown.returncode == 0 and NOTE in shown.stdout, shown.stdout + shown.stderr
            applied = project.cli("apply")
            assert applied.returncode == 0, applied.stderr
            assert written.read_text() == NOTE_TEXT
        client.detach()
