"""Claude Code, Codex, Gemini CLI, Qwen Code, pi and Crush, the real agents, in the sandbox on the
docker runtime, on a real terminal, as root and as uid 1001 (the scenario: `terminal_agent_scenario.py`).

Each agent talks to the scripted model over HTTPS through the egress proxy, which finds it by name
as it would the provider (the site, relay and CA of `test_agent_secret_docker.py`).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import trustme

from opencode_sandbox.images.builder import ensure_base_image
from opencode_sandbox.images.progress import SilentProgress
from tests.e2e.harness import Project, docker
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
from tests.fixtures.images import RunnerBase
from tests.fixtures.model_server import ModelServer

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


@pytest.fixture
def base_image_put_back(runner_base_image: RunnerBase) -> Iterator[None]:
    """The session's base image as it was: a start that trusts the test's CA builds it with that CA
    too, and the tests after this one expect it without."""
    yield
    ensure_base_image(dind=False, opencode_version=runner_base_image.opencode_version, trust_host_ca=True,
                      progress=SilentProgress())


@pytest.mark.parametrize(("agent", "workspace"), [*((agent, "shared") for agent in sorted(CASES)),
                                                  ("claude-code", "isolated")])
def test_a_terminal_agent_works_in_a_session_that_outlives_the_terminal(
    agent: str, workspace: str, any_user_project: Project, site: Site, recorder: Recorder,  # noqa: F811
    unique: str, runner_base_image: RunnerBase,
    proxy_images_removed_after: None,  # noqa: F811
    base_image_put_back: None,
) -> None:
    case, project = CASES[agent], any_user_project
    if reason := cannot_install(case):
        pytest.skip(reason)
    project.env["OPENCODE_SANDBOX_WORKSPACE"] = workspace
    ca = trustme.CA()
    ca_file = project.user_home / "model-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(site.model_name, site.other_name).configure_cert(tls)
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
