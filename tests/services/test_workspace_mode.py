"""When the guard looks at the checkout, by the mode the VM was made in and the one asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services.workspace_mode import guard_runs_after, guard_runs_at_start, works_isolated
from opencode_sandbox.state.store import ProjectState
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app

NEVER_RAN = ProjectState()
RAN_SHARED = ProjectState(home_volume="home", workspace="shared")
RAN_BEFORE_THE_MODES = ProjectState(home_volume="home")
RAN_ISOLATED = ProjectState(home_volume="home", workspace="isolated")


@pytest.mark.parametrize(("wanted", "recorded", "runs"), [
    ("shared", NEVER_RAN, True),
    ("shared", RAN_ISOLATED, True),  # the review records what the coming shared VM starts from
    ("isolated", NEVER_RAN, False),
    ("isolated", RAN_ISOLATED, False),
    ("isolated", RAN_SHARED, True),  # what the last VM, which had the checkout, changed is shown
    ("isolated", RAN_BEFORE_THE_MODES, True),
])
def test_a_start_reviews_the_checkout_unless_no_vm_has_it(tmp_path: Path, wanted: str, recorded: ProjectState,
                                                          runs: bool) -> None:
    app = make_app(FakeRuntime(RuntimeKind.DOCKER), tmp_path)
    app.settings = load_settings([], {}, {"runtime": "docker", "workspace": wanted})
    assert guard_runs_at_start(app, recorded) is runs


@pytest.mark.parametrize(("recorded", "isolated"), [(RAN_SHARED, False), (RAN_BEFORE_THE_MODES, False),
                                                     (RAN_ISOLATED, True)])
def test_a_detach_or_a_stop_reviews_the_checkout_of_a_vm_that_had_it(tmp_path: Path, recorded: ProjectState,
                                                                     isolated: bool) -> None:
    app = make_app(FakeRuntime(RuntimeKind.DOCKER), tmp_path)
    app.state.save(app.project.slug, recorded)
    assert works_isolated(app) is isolated
    assert guard_runs_after(app) is not isolated
