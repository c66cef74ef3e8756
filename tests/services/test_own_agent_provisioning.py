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


@pytest.mark.parametrize("named", ["dotfiles", "amp-config"])
def test_a_configuration_reached_through_a_link_never_takes_what_the_configuration_refuses_by_name(
        named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dotfiles folder that `~/.config` and `~/.ssh` link into, and a link to `~/.ssh` of its own:
    the names say nothing, the resolved paths do."""
    home = tmp_path / "home"
    (home / "dotfiles/config/opencode-sandbox").mkdir(parents=True)
    (home / "dotfiles/ssh").mkdir()
    (home / "dotfiles/config/opencode-sandbox/secrets.env").write_text("OPENAI_API_KEY=sk-host-only\n")
    (home / "dotfiles/ssh/id_ed25519").write_text("PRIVATE KEY\n")
    (home / ".config").symlink_to("dotfiles/config")
    (home / ".ssh").symlink_to("dotfiles/ssh")
    (home / "amp-config").symlink_to(".ssh")
    monkeypatch.setenv("HOME", str(home))
    for variable in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(variable, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    [agent] = parse_agents({"amp": {"package": "amp-cli", "command": "amp", "config": [named]}}, PROFILES)
    with pytest.raises(ConfigError, match=f"its configuration ~/{named} would copy "):
        provisioning.sources_for_environment(project, agent)


@pytest.mark.parametrize("named", [".SSH", ".Ssh/id_rsa", ".Claude", ".CODEX/auth.json", ".password-store"])
def test_a_protected_place_written_in_other_letters_is_refused(named: str) -> None:
    with pytest.raises(ValueError, match="stays on your host"):
        parse_agents({"amp": {"package": "amp-cli", "command": "amp", "config": [named]}}, PROFILES)
