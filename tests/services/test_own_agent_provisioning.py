"""What an agent of the user's own gets of their home: what its `config` names, never a folder of
this tool's that `XDG_*` moved where the configuration could not know it."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.core.agents import PROFILES
from opencode_sandbox.core.agents.custom import parse_agents
from opencode_sandbox.errors import ConfigError
from opencode_sandbox.services import provisioning


def test_its_configuration_is_copied_to_the_same_place_and_the_tools_moved_folders_never(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".config/mine").mkdir(parents=True)
    (home / ".config/mine/settings.json").write_text("{}")
    (home / "dotfiles/opencode-sandbox").mkdir(parents=True)
    (home / "dotfiles/opencode-sandbox/secrets.env").write_text("MINE_API_KEY=sk-host-only\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "dotfiles"))
    project = tmp_path / "project"
    project.mkdir()

    [mine] = parse_agents({"mine": {"package": "mine-cli", "command": "mine", "config": [".config/mine"]}}, PROFILES)
    collected = provisioning.collect_files(provisioning.sources_for_environment(project, mine))
    assert list(collected.files) == [".config/mine/settings.json"]

    [greedy] = parse_agents({"mine": {"package": "mine-cli", "command": "mine", "config": ["dotfiles"]}}, PROFILES)
    with pytest.raises(ConfigError) as caught:
        provisioning.sources_for_environment(project, greedy)
    assert caught.value.message == (f"mine: its configuration ~/dotfiles would copy this tool's own "
                                    f"{home / 'dotfiles/opencode-sandbox'} into the VM")
