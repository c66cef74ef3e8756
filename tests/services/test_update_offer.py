"""A start's word on a newer release, for opencode and for a terminal agent: offered on a terminal,
mentioned without one, each version once."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.images import updater
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.services.image_step import UpdateCheck
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app, messages


def known_releases() -> Path:
    """The state a daily check leaves: opencode 1.5.0 and Claude Code 2.2.0 out, images with older ones."""
    state_root = ToolPaths.from_environment().state_dir
    updater.save_state(state_root, updater.UpdaterState(
        baked_version="1.2.3", latest_version="1.5.0", agent_versions=(("claude-code", "2.1.0"),),
        agent_latest=(("claude-code", "2.2.0"),)))
    return state_root


@pytest.mark.parametrize("interactive", [True, False], ids=["terminal", "no terminal"])
def test_a_newer_opencode_is_offered_or_mentioned_once(tmp_path: Path, interactive: bool) -> None:
    known_releases()
    app = make_app(FakeRuntime(), tmp_path, interactive=interactive)
    check = UpdateCheck(app)
    assert check.pending_version(None) == ("1.5.0" if interactive else None)
    mentioned = "opencode 1.5.0 is available (this image has 1.2.3); run `opencode-sandbox build` to upgrade"
    assert (mentioned in messages(app)) is not interactive
    assert check.pending_version(None) is None


@pytest.mark.parametrize("interactive", [True, False], ids=["terminal", "no terminal"])
def test_a_newer_agent_is_offered_or_mentioned_once(tmp_path: Path, interactive: bool) -> None:
    known_releases()
    app = make_app(FakeRuntime(), tmp_path, interactive=interactive)
    app.settings = load_settings([], {}, {"agent": "claude-code"})
    check = UpdateCheck(app)
    assert check.pending_agent_version() == ("2.2.0" if interactive else None)
    mentioned = ("Claude Code 2.2.0 is available (this image has 2.1.0); "
                 "run `opencode-sandbox build --agent claude-code` to upgrade")
    assert (mentioned in messages(app)) is not interactive
    assert check.pending_agent_version() is None
