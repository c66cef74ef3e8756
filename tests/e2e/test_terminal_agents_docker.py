"""The terminal agents, the real agents, in the sandbox on the docker runtime, on a real terminal, as
root and as uid 1001: those that can be pointed at the scripted model go through
`terminal_agent_scenario.py`; GitHub Copilot CLI and Factory Droid, which cannot, render on a real
terminal without one.

Each agent talks to the scripted model over HTTPS through the egress proxy, which finds it by name
as it would the provider (the site, relay and CA of `test_agent_secret_docker.py`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from opencode_sandbox.images.updater import record_baked_agent_version
from tests.e2e.harness import Project, Tmux, docker, wait_until
from tests.e2e.terminal_agent_scenario import (
    CASES,
    agent_steps,
    assert_the_outcome,
    cannot_install,
    configure,
    run_scenario,
)
from tests.e2e.test_agent_secret_docker import (  # noqa: F401 (fixtures)
    Recorder,
    Site,
    recorder,
    serve_proxy,
    site,
    start_relay,
)
from tests.e2e.test_network_policy_docker import proxy_images_removed_after  # noqa: F401 (a fixture)
from tests.fixtures.agents import COPILOT_VERSION, DROID_VERSION
from tests.fixtures.images import RunnerBase
from tests.fixtures.model_server import ModelServer

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def model_tls(project: Project, model_site: Site, ca: trustme.CA) -> tuple[Path, ssl.SSLContext]:
    """The scripted model's certificate, issued for the provider's name by `ca` (the `model_ca`
    fixture's), which the user's configuration then trusts: the CA's file and the server's TLS
    context."""
    ca_file = project.user_home / "model-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(model_site.model_name, model_site.other_name).configure_cert(tls)
    return ca_file, tls


@pytest.mark.parametrize(("agent", "workspace"), [*((agent, "shared") for agent in sorted(CASES)),
                                                  ("claude-code", "isolated")])
def test_a_terminal_agent_works_in_a_session_that_outlives_the_terminal(
    agent: str, workspace: str, any_user_project: Project, site: Site, recorder: Recorder,  # noqa: F811
    unique: str, runner_base_image: RunnerBase,
    proxy_images_removed_after: None,  # noqa: F811
    model_ca: trustme.CA,
) -> None:
    case, project = CASES[agent], any_user_project
    if reason := cannot_install(case.name, case.version):
        pytest.skip(reason)
    project.env["OPENCODE_SANDBOX_WORKSPACE"] = workspace
    ca_file, tls = model_tls(project, site, model_ca)
    steps = agent_steps(case)
    with ModelServer.start(steps, bind=site.gateway, advertised_host=site.gateway, tls=tls) as model:
        start_relay(site, urlsplit(model.url).port or 0, recorder.port, runner_base_image.result.reference)
        configure(project, case, site.model_name, ca_file)
        serve_proxy(project, site)

        def in_vm(script: str, user: str) -> str:
            result = docker("exec", "--user", user, project.vm, "sh", "-c", script)
            return result.stdout + result.stderr

        reaper_log = run_scenario(project, case, model, steps, in_vm, unique)
    assert_the_outcome(project, reaper_log)


@dataclass(frozen=True)
class RenderCase:
    """An agent that cannot be pointed at the scripted model, on a real terminal without a model."""

    version: str
    question: str
    """What its first start asks."""
    answer: tuple[str, ...]
    """The keys that answer it for good; none: the question stays until the user signs in."""
    after: str
    """What it shows once answered (or still, unanswered)."""
    remembered: tuple[str, str] | None
    """A file of the VM's home, and what it holds once the answer is remembered."""
    history: str
    """What a terminal attaching later finds on the session's screen."""


RENDER_CASES = {
    # Its own model comes only from `COPILOT_PROVIDER_*` variables, which the VM does not get from the
    # host; otherwise it signs in to GitHub.
    "copilot": RenderCase(COPILOT_VERSION, r"Do you trust the files in this folder", ("2", "Enter"), r"/login",
                          (".copilot/config.json", '"/workspace"'), r"added to trusted folders"),
    # Its interface asks for a Factory sign-in first, even with a model of the user's own.
    "droid": RenderCase(DROID_VERSION, r"Please login with your Factory account", (),
                        r"Please login with your Factory account", None, r"Please login with your Factory account"),
}


@pytest.mark.parametrize("agent", sorted(RENDER_CASES))
def test_an_agent_without_the_scripted_model_renders_and_its_session_outlives_the_terminal(
    agent: str, any_user_project: Project, unique: str, runner_base_image: RunnerBase,
) -> None:
    """GitHub Copilot CLI and Factory Droid cannot be pointed at the scripted model here (see
    `RENDER_CASES`), and their hooks report from the first prompt on, so they report nothing: the
    agent's interface renders on a real terminal, its first question is answered once and remembered
    in the VM's home (or waits for a sign-in), its session outlives the closed terminal, a new terminal
    attaches to it, and the VM stops once no terminal is attached."""
    case, project = RENDER_CASES[agent], any_user_project
    if reason := cannot_install(agent, case.version):
        pytest.skip(reason)
    project.env.update({"OPENCODE_SANDBOX_AGENT": agent, "OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT": "1h"})
    record_baked_agent_version(project.paths.state_dir, agent, case.version)
    if project.user and project.home:
        project.user.give(project.home)
    seeded = project.cli("shell", "--", "true", timeout=3600)
    assert seeded.returncode == 0, seeded.stderr

    def in_vm(script: str) -> str:
        result = docker("exec", "--user", "dev", project.vm, "sh", "-c", script)
        return result.stdout + result.stderr

    def session_running() -> bool:
        return in_vm("tmux has-session -t agent && echo running").strip().endswith("running")

    first = Tmux(f"osb-{agent}-1-{unique}", project.terminal_command(), project.root, project.env)
    try:
        first.wait_for(case.question, timeout=300)
        for key in case.answer:
            first.send(key)
        first.wait_for(case.after, timeout=60)
        if case.remembered:
            path, text = case.remembered
            assert text in in_vm(f"cat ~/{path}"), "the answer is remembered in the VM's home"
    finally:
        first.close()
    assert not wait_until(lambda: not (session_running() and project.vm_running()), 10), project.reaper_log()

    # The next terminal attaches to the same session; once it closes too, the VM stops.
    project.env["OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT"] = "2s"
    second = Tmux(f"osb-{agent}-2-{unique}", project.terminal_command(), project.root, project.env)
    try:
        second.wait_for(case.history, timeout=120)
    finally:
        second.close()
    assert wait_until(project.vm_stopped, 90), project.reaper_log()
    assert "all sessions are quiet" in project.reaper_log(), project.reaper_log()
