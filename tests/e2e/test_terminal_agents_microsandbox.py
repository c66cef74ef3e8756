"""The terminal agents (every agent but opencode), the real agents, in the sandbox on the
microsandbox runtime, in booting microVMs, on a real terminal (the scenario:
`terminal_agent_scenario.py`; the lab runs it as root and as `tester`, uid 1001).

The model serves HTTPS on the lab's stand-in internet as `model.lab.test` (see
`test_network_policy_microsandbox.py`); msb puts the key into the requests to it.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project
from tests.e2e.terminal_agent_scenario import (
    CASES,
    agent_steps,
    assert_the_outcome,
    cannot_install,
    configure,
    run_scenario,
)
from tests.e2e.test_network_policy_microsandbox import LAB_INTERNET, LAB_SIDE, in_vm, model_tls
from tests.fixtures.model_server import ModelServer

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(5400), *MICROVMS_ONLY,
              pytest.mark.skipif(not LAB_INTERNET, reason="needs the lab's stand-in for the internet")]

SLOW = 6.0
"""Under the lab's emulation the agents start and answer many times slower."""


@pytest.mark.parametrize("agent", sorted(CASES))
def test_a_terminal_agent_works_in_a_session_that_outlives_the_terminal(agent: str, msb_project: Project,
                                                                        unique: str) -> None:
    case, project = CASES[agent], msb_project
    if reason := cannot_install(case.name, case.version):
        pytest.skip(reason)
    ca_file, tls = model_tls(project.user_home)
    steps = agent_steps(case)
    with ModelServer.start(steps, bind=LAB_SIDE, advertised_host="model.lab.test", tls=tls, port=8443) as model:
        configure(project, case, "model.lab.test", ca_file)
        reaper_log = run_scenario(project, case, model, steps, lambda script, user: in_vm(project, script, user),
                                  unique, SLOW)
    assert_the_outcome(project, reaper_log)
