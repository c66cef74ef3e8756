"""Agents of the user's own (`agents`): each definition read into a terminal agent's profile, and every
field that could reach further than the user meant refused with the agent and the field named."""

from __future__ import annotations

from typing import Any

import pytest

from opencode_sandbox.core.agents import PROFILES, find_profile
from opencode_sandbox.core.agents.custom import parse_agents
from opencode_sandbox.core.agents.profile import ActivitySource, ConfigSource, Credential, SessionKind

AMP = {
    "title": "Amp",
    "package": "@sourcegraph/amp",
    "command": "amp",
    "arguments": ["--dangerously-allow-all"],
    "credentials": [{"variable": "AMP_API_KEY", "hosts": ["ampcode.com"], "headers": ["Authorization"]}],
    "hosts": ["*.ampcode.com"],
    "config": [".config/amp", "~/.amp-notes.md"],
    "environment": {"AMP_SKIP_UPDATE_CHECK": 1, "AMP_LOG_LEVEL": "warn"},
}


def parsed(**fields: Any) -> Any:
    [profile] = parse_agents({"amp": {**AMP, **fields}}, PROFILES)
    return profile


def refusal(value: Any) -> str:
    with pytest.raises(ValueError) as caught:
        parse_agents(value, PROFILES)
    return str(caught.value)


def test_a_definition_becomes_a_terminal_agent_without_hooks() -> None:
    profile = parsed()
    assert (profile.name, profile.title, profile.package, profile.command) == ("amp", "Amp", "@sourcegraph/amp", "amp")
    assert profile.session is SessionKind.TERMINAL and profile.activity is ActivitySource.TERMINAL
    assert profile.image_files == () and profile.checkout_config is None and profile.install == ""
    assert profile.credentials == (Credential("AMP_API_KEY", ("ampcode.com",), ("authorization",)),)
    assert profile.hosts == ("*.ampcode.com", "ampcode.com"), "its credentials' hosts are among those it needs"
    assert profile.config == (ConfigSource(".config/amp", ".config/amp"),
                              ConfigSource(".amp-notes.md", ".amp-notes.md"))
    assert profile.environment == (("AMP_SKIP_UPDATE_CHECK", "1"), ("AMP_LOG_LEVEL", "warn"))
    assert profile.session_command(["--mode", "low"]) == ["amp", "--dangerously-allow-all", "--mode", "low"]
    assert profile.version_flag == "", "the build checks only that the command is there"


def test_only_the_package_and_the_command_are_needed_and_the_title_defaults_to_the_name() -> None:
    [profile] = parse_agents({"amp": {"package": "@sourcegraph/amp", "command": "amp"}}, PROFILES)
    assert profile.title == "amp" and profile.credentials == () and profile.hosts == () and profile.config == ()
    assert parse_agents(None, PROFILES) == () and parse_agents({}, PROFILES) == ()


def test_an_install_script_instead_of_a_package() -> None:
    [profile] = parse_agents({"tool": {"install": "curl -fsSL https://example.org/i.sh | sh\nln -s /opt/t /usr/bin/t",
                                       "command": "/usr/bin/t"}}, PROFILES)
    assert profile.package == "" and profile.install.startswith("curl ") and profile.command == "/usr/bin/t"


def test_the_lookup_finds_a_built_in_profile_first_then_the_users_own() -> None:
    own = parse_agents({"amp": AMP}, PROFILES)
    assert find_profile("codex", own) is PROFILES["codex"]
    assert find_profile("amp", own) == own[0]
    assert find_profile("amp") is None and find_profile("vim", own) is None


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_built_in_name_cannot_be_taken(name: str) -> None:
    assert refusal({name: AMP}) == f"'{name}' is a built-in agent's name; give yours another one"


@pytest.mark.parametrize("name", ["Amp", "1amp", "amp tool", "a" * 33, "", "amp/x", 7])
def test_a_name_is_a_plain_word(name: Any) -> None:
    assert "is not an agent's name" in refusal({name: AMP})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"package": None}, "amp: give either 'package' (an npm package) or 'install'"),
        ({"install": "sh x.sh"}, "amp: give either 'package' (an npm package) or 'install'"),
        ({"package": "Not A Package"}, "amp: 'package': 'Not A Package' is not an npm package name"),
        ({"package": "@scope/pkg; rm -rf /"}, "is not an npm package name"),
        ({"command": "amp --yes"}, "amp: 'command': 'amp --yes' is not a program's name or absolute path"),
        ({"command": "../amp"}, "is not a program's name"),
        ({"command": None}, "is not a program's name"),
        ({"title": "two\nlines"}, "amp: 'title': "),
        ({"title": ""}, "amp: 'title': "),
        ({"arguments": "--dangerously-allow-all"}, "amp: 'arguments' must be a list of words"),
        ({"arguments": [1]}, "amp: 'arguments' must be a list of words"),
        ({"hosts": ["10.0.0.1"]}, "amp: hosts: '10.0.0.1': a secret is sent to host names, not addresses"),
        ({"hosts": ["ampcode.com:443"]}, "amp: hosts: 'ampcode.com:443': a secret's host takes no port"),
        ({"hosts": ["com"]}, "names a whole top-level domain"),
        ({"hosts": "ampcode.com"}, "amp: 'hosts' must be a list"),
        ({"credentials": [{"variable": "amp_key", "hosts": ["ampcode.com"]}]},
         "amp: credentials: 'amp_key' is not a secret's variable name"),
        ({"credentials": [{"variable": "AMP_API_KEY"}]}, "amp: credentials: AMP_API_KEY: list the hosts"),
        ({"credentials": [{"variable": "AMP_API_KEY", "hosts": ["ampcode.com"], "headers": ["bad header"]}]},
         "amp: credentials: 'bad header' is not a request header name"),
        ({"credentials": [{"variable": "AMP_API_KEY", "hosts": ["ampcode.com"], "header": "authorization"}]},
         "amp: credentials: unknown field header"),
        ({"credentials": [{"variable": "AMP_API_KEY", "hosts": ["a.example"]}] * 2},
         "amp: credentials: AMP_API_KEY is given twice"),
        ({"credentials": [{"variable": "OPENCODE_SANDBOX_CPUS", "hosts": ["a.example"]}]},
         "one of opencode-sandbox's own settings"),
        ({"environment": {"AMP_API_KEY": "sk-123"}}, "amp: environment: AMP_API_KEY names a credential"),
        ({"environment": {"GITHUB_TOKEN": "ghp"}}, "amp: environment: GITHUB_TOKEN names a credential"),
        ({"environment": {"A": "two\nlines"}}, "amp: environment: A: write its value as one line of text"),
        ({"environment": {"A": True}}, "amp: environment: A: write its value as one line of text"),
        ({"environment": {"OPENCODE_SANDBOX_AGENT": "x"}}, "is not a variable the agent may have"),
        ({"environment": ["A=1"]}, "amp: 'environment' must be a mapping"),
        ({"version": "1.0"}, "amp: unknown field version; an agent has title, package, install"),
    ],
)
def test_every_field_is_checked_and_the_error_names_the_agent_and_the_field(fields: dict[str, Any],
                                                                           message: str) -> None:
    assert message in refusal({"amp": {key: value for key, value in {**AMP, **fields}.items()
                                       if value is not None or key not in ("package",)}})


@pytest.mark.parametrize(
    ("path", "what"),
    [
        (".claude", "Claude Code's login ~/.claude/.credentials.json"),
        (".claude/.credentials.json", "Claude Code's login ~/.claude/.credentials.json"),
        (".claude.json", "Claude Code's login ~/.claude.json"),
        ("~/.codex", "Codex's login ~/.codex/auth.json"),
        (".local/share/opencode", "opencode's login ~/.local/share/opencode/auth.json"),
        (".local", "opencode's login ~/.local/share/opencode/auth.json"),
        (".config", "~/.config/opencode-sandbox"),
        (".config/opencode-sandbox/secrets.env", "~/.config/opencode-sandbox"),
        (".local/state/opencode-sandbox", "~/.local/state/opencode-sandbox"),
        (".ssh/id_ed25519", "~/.ssh"),
        (".docker", "~/.docker/config.json"),
    ],
)
def test_a_configuration_path_never_takes_a_login_or_this_tools_own_files(path: str, what: str) -> None:
    message = refusal({"amp": {**AMP, "config": [path]}})
    assert message == f"amp: config: '{path}' would copy {what} into the VM; that stays on your host"


@pytest.mark.parametrize("path", ["/etc/passwd", "../other-user", ".config/../../x", "", ".", "~", 7])
def test_a_configuration_path_stays_inside_the_home(path: Any) -> None:
    assert "is not a file or folder inside your home" in refusal({"amp": {**AMP, "config": [path]}})


def test_the_agents_key_is_a_mapping_of_its_own_file() -> None:
    assert "define agents in your configuration file" in refusal("amp=@sourcegraph/amp")
    assert "expected a mapping of agent names" in refusal(["amp"])
    assert refusal({"amp": "@sourcegraph/amp"}).startswith("amp: expected a mapping of its fields")


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_no_built_in_agent_copies_a_login_of_any_agent(name: str) -> None:
    """The logins the profiles name are the ones an agent of the user's own may not name either."""
    logins = [login for profile in PROFILES.values() for login in profile.logins]
    for source in PROFILES[name].config:
        assert not any(source.host == login or login.startswith(source.host + "/") or source.host.startswith(login)
                       for login in logins), (name, source)
