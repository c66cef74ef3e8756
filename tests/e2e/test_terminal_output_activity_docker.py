"""An agent without hooks, on the docker runtime: Codex, the real agent, with a profile that gives
its image no hooks and tells its activity by its terminal's output (`ActivitySource.TERMINAL`). The
scenario of every terminal agent (`terminal_agent_scenario.py`) holds: the VM stays up while the
held turn runs with no terminal attached, the turn's end is signalled once, and the VM stops after.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from opencode_sandbox.core import agents
from opencode_sandbox.core.agents.profile import ActivitySource
from tests.e2e.harness import Project, docker
from tests.e2e.terminal_agent_scenario import CASES, agent_steps, assert_the_outcome, configure, run_scenario
from tests.e2e.test_agent_secret_docker import (  # noqa: F401 (fixtures)
    Recorder,
    Site,
    recorder,
    serve_proxy,
    site,
    start_relay,
)
from tests.e2e.test_network_policy_docker import proxy_images_removed_after  # noqa: F401 (a fixture)
from tests.e2e.test_terminal_agents_docker import model_tls
from tests.fixtures.images import RunnerBase
from tests.fixtures.model_server import ModelServer

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

HOOKLESS = Path(__file__).parents[1] / "fixtures" / "hookless_codex"
"""The `sitecustomize` that gives the tool's processes Codex's profile without hooks."""


def test_an_agent_without_hooks_holds_the_vm_while_its_terminal_prints(
    project: Project, site: Site, recorder: Recorder, unique: str,  # noqa: F811
    runner_base_image: RunnerBase, monkeypatch: pytest.MonkeyPatch,
    proxy_images_removed_after: None,  # noqa: F811
    model_ca: trustme.CA,
) -> None:
    hookless = agents.PROFILES["codex"]._replace(activity=ActivitySource.TERMINAL, image_files=())
    monkeypatch.setattr(agents, "PROFILES", {**agents.PROFILES, "codex": hookless})  # what the test reads
    project.env["PYTHONPATH"] = str(HOOKLESS)
    tool = subprocess.run([sys.executable, "-c", "from opencode_sandbox.core.agents import profile_of; "
                           "print(repr(profile_of('codex')))"],
                          env=project.process_env(), capture_output=True, text=True, check=True)
    assert tool.stdout.strip() == repr(hookless), "the tool's processes read the same profile as the test"
    case = CASES["codex"]
    ca_file, tls = model_tls(project, site, model_ca)
    steps = agent_steps(case)
    with ModelServer.start(steps, bind=site.gateway, advertised_host=site.gateway, tls=tls) as model:
        start_relay(site, urlsplit(model.url).port or 0, recorder.port, runner_base_image.result.reference)
        configure(project, case, site.model_name, ca_file)
        serve_proxy(project, site)

        def in_vm(script: str, user: str) -> str:
            result = docker("exec", "--user", user, project.vm, "sh", "-c", script)
            return result.stdout + result.stderr

        assert in_vm("ls /etc/codex 2>&1; true", "root").strip().endswith("No such file or directory"), \
            "the image has no hooks"
        reaper_log = run_scenario(project, case, model, steps, in_vm, unique)
    assert_the_outcome(project, reaper_log)
