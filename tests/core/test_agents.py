"""The agents' profiles: what each says, the credentials that become secrets, and the report a
terminal agent's session and hooks give, read as the untrusted text it is."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from opencode_sandbox.cli.option_table import AGENT_NAMES
from opencode_sandbox.core.agent_activity import AgentReport, AgentState, as_activity, parse_report
from opencode_sandbox.core.agents import DEFAULT_AGENT, PROFILES, SessionKind, implied_secrets, pi, profile_of
from opencode_sandbox.core.agents.profile import AGENT_EVENT, ActivitySource
from opencode_sandbox.core.egress import parse_rule
from opencode_sandbox.core.quiescence import decide_stop
from opencode_sandbox.core.secrets import parse_secret
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.core.terminal_activity import QUIET_AFTER_S


def test_opencode_is_the_default_and_the_command_line_names_every_profile() -> None:
    assert DEFAULT_AGENT == "opencode" and profile_of(DEFAULT_AGENT).session is SessionKind.SERVER
    assert tuple(PROFILES) == AGENT_NAMES
    with pytest.raises(KeyError):
        profile_of("vim")


def test_every_agent_module_is_a_profile_under_its_own_name() -> None:
    """The table loads each profile's module when it is asked for: none of the package's agent
    modules may be missing from it, and each must be found under the name its profile gives."""
    import importlib
    import pkgutil

    import opencode_sandbox.core.agents as package

    modules = [info.name for info in pkgutil.iter_modules(package.__path__)]
    holding_a_profile = {name for name in modules
                         if hasattr(importlib.import_module(f"{package.__name__}.{name}"), "PROFILE")}
    assert len(holding_a_profile) == len(PROFILES) == 10
    for name, profile in PROFILES.items():
        assert profile.name == name
    assert {type(profile).__module__ for profile in PROFILES.values()} == {f"{package.__name__}.profile"}
    assert {importlib.import_module(f"{package.__name__}.{module}").PROFILE.name
            for module in holding_a_profile} == set(PROFILES)
    assert "vim" not in PROFILES and PROFILES.get("vim") is None


@pytest.mark.parametrize("name", ["claude-code", "codex", "gemini", "qwen-code", "droid", "copilot"])
def test_a_terminal_agent_is_installed_from_npm_and_reports_its_turns_through_hooks(name: str) -> None:
    profile = profile_of(name)
    assert profile.session is SessionKind.TERMINAL and profile.activity is ActivitySource.HOOKS
    assert profile.package.startswith("@") and profile.command
    assert profile.credentials
    assert all(set(credential.hosts) <= set(profile.hosts) for credential in profile.credentials)
    [(path, content)] = profile.image_files
    assert path.startswith("/etc/")
    commands = (json.dumps(json.loads(content)) if path.endswith(".json")
                else json.dumps(tomllib.loads(content)))
    for state in ("busy", "waiting", "asking"):
        assert f"{AGENT_EVENT} {state}" in commands, f"{name} reports {state}"


def test_pi_reports_its_turns_through_an_extension_of_the_image_named_on_its_command_line() -> None:
    profile = profile_of("pi")
    assert profile.session is SessionKind.TERMINAL and profile.activity is ActivitySource.HOOKS
    [(path, content)] = profile.image_files
    assert path == pi.EXTENSION and path.startswith("/etc/")
    assert profile.session_command(["--model", "x"]) == ["pi", "--extension", path, "--model", "x"]
    assert f'spawnSync("{AGENT_EVENT}", [state]' in content
    handlers = dict(re.findall(r'pi\.on\("(\w+)", \(\) => report\("(\w+)"\)\)', content))
    assert handlers == {"session_start": "idle", "agent_start": "busy", "tool_execution_start": "busy",
                        "agent_end": "waiting"}
    assert 'event?.reason === "quit") report("ended")' in content, "only quitting pi ends the session"


def test_crush_has_no_hook_for_the_end_of_a_turn_so_its_terminal_tells() -> None:
    profile = profile_of("crush")
    assert profile.session is SessionKind.TERMINAL and profile.activity is ActivitySource.TERMINAL
    assert profile.image_files == () and profile.session_command([]) == ["crush"]


@pytest.mark.parametrize("name", ["claude-code", "codex", "pi", "crush"])
def test_each_credential_of_a_terminal_agent_goes_to_its_own_providers_hosts_alone(name: str) -> None:
    profile = profile_of(name)
    assert profile.package.startswith("@") and profile.credentials
    variables = [credential.variable for credential in profile.credentials]
    assert len(variables) == len(set(variables))
    for credential in profile.credentials:
        assert set(credential.hosts) <= set(profile.hosts) and credential.headers
        others = {host for other in profile.credentials if other is not credential for host in other.hosts}
        assert not set(credential.hosts) & others, f"{credential.variable} shares a host with another key"


@pytest.mark.parametrize(("name", "variable", "host", "header"), [
    ("pi", "GEMINI_API_KEY", "generativelanguage.googleapis.com", "x-goog-api-key"),
    ("pi", "OPENROUTER_API_KEY", "openrouter.ai", "authorization"),
    ("crush", "ANTHROPIC_API_KEY", "api.anthropic.com", "x-api-key"),
    ("crush", "HYPER_API_KEY", "hyper.charm.land", "authorization"),
])
def test_a_key_of_a_many_provider_agent_is_a_secret_only_when_it_has_a_value(
        name: str, variable: str, host: str, header: str) -> None:
    [secret] = implied_secrets(profile_of(name), (), lambda candidate: candidate == variable)
    assert secret.name == variable and [rule.text for rule in secret.hosts] == [host]
    assert secret.headers == (header,)


@pytest.mark.parametrize(("name", "path", "events"), [
    ("droid", "/etc/factory/settings.json", {"UserPromptSubmit": "busy", "Stop": "waiting", "Notification": "asking"}),
    ("copilot", "/etc/github-copilot/policy.d/opencode-sandbox.json",
     {"userPromptSubmitted": "busy", "agentStop": "waiting", "notification": "asking"}),
])
def test_droid_and_copilot_hooks_sit_in_their_system_files_under_the_events_they_name(
        name: str, path: str, events: dict[str, str]) -> None:
    [(image_path, content)] = profile_of(name).image_files
    assert image_path == path
    hooks = json.loads(content)["hooks"]
    for event, state in events.items():
        assert f"{AGENT_EVENT} {state}" in json.dumps(hooks[event]), f"{name}: {event} reports {state}"
    if name == "copilot":
        assert "permissionRequest" not in hooks, "it comes before tool calls that need no answer too"
        assert json.loads(content)["version"] == 1
        assert all(action["type"] == "command" and "bash" in action for actions in hooks.values() for action in actions)


def test_cline_has_no_hooks_the_image_can_hold_so_its_terminal_tells_whether_it_works() -> None:
    cline = profile_of("cline")
    assert cline.session is SessionKind.TERMINAL and cline.activity is ActivitySource.TERMINAL
    assert cline.image_files == () and cline.package == "cline" and cline.command == "cline"
    assert all(set(credential.hosts) <= set(cline.hosts) for credential in cline.credentials)
    assert ("CLINE_NO_AUTO_UPDATE", "1") in cline.environment


@pytest.mark.parametrize(("name", "variable", "value"), [
    ("droid", "FACTORY_DROID_AUTO_UPDATE_ENABLED", "false"),
    ("copilot", "COPILOT_AUTO_UPDATE", "false"),
    ("claude-code", "DISABLE_AUTOUPDATER", "1"),
])
def test_an_agent_does_not_update_itself_in_the_vm(name: str, variable: str, value: str) -> None:
    assert (variable, value) in profile_of(name).environment


@pytest.mark.parametrize(("name", "folder", "target"), [
    ("droid", "droid", ".factory"), ("cline", "cline", ".cline"), ("copilot", "copilot", ".copilot"),
    ("claude-code", "claude-code", ".claude"), ("codex", "codex", ".codex"),
])
def test_the_checkouts_folder_of_an_agent_goes_over_its_home_folder(name: str, folder: str, target: str) -> None:
    checkout = profile_of(name).checkout_config
    assert checkout is not None and (checkout.host, checkout.target) == (folder, target)
    assert all(source.target.startswith(f"{target}/") or source.target.startswith("Documents/")
               for source in profile_of(name).config)


@pytest.mark.parametrize(("name", "never_copied"), [
    ("droid", (".factory/auth.json", ".factory/config.json", ".factory/sessions")),
    ("cline", (".cline/data/secrets.json", ".cline/data/globalState.json", ".cline/data/sessions")),
    ("copilot", (".copilot/config.json", ".copilot/session-state", ".copilot/session-store.db")),
])
def test_an_agents_logins_and_sessions_are_never_copied(name: str, never_copied: tuple[str, ...]) -> None:
    copied = [source.host for source in profile_of(name).config]
    assert not [path for path in never_copied if any(path.startswith(host) or host.startswith(path) for host in copied)]


def test_a_github_token_becomes_a_secret_for_github_and_copilots_api_alone() -> None:
    copilot = profile_of("copilot")
    secrets = implied_secrets(copilot, (), lambda name: name == "GH_TOKEN")
    assert [(secret.name, [rule.text for rule in secret.hosts], secret.headers) for secret in secrets] == [
        ("GH_TOKEN", ["api.github.com", "api.githubcopilot.com", "*.githubcopilot.com"], ("authorization",))]
    assert [secret.name for secret in implied_secrets(profile_of("cline"), (), lambda name: True)] == [
        "CLINE_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"]


def test_the_codex_session_leaves_the_sandboxing_to_the_vm_and_takes_the_users_arguments_last() -> None:
    assert profile_of("codex").session_command(["--model", "x"]) == [
        "codex", "--sandbox", "danger-full-access", "--model", "x"]
    assert profile_of("claude-code").session_command([]) == ["claude"]
    for name in ("droid", "cline", "copilot"):
        assert profile_of(name).session_command(["--x"]) == [profile_of(name).command, "--x"]


def _system_settings(name: str) -> dict[str, object]:
    [(_, content)] = profile_of(name).image_files
    settings: dict[str, object] = json.loads(content)
    return settings


def _hook_states(settings: dict[str, object]) -> dict[str, str]:
    hooks = settings["hooks"]
    assert isinstance(hooks, dict)
    return {event: command.removeprefix(f"{AGENT_EVENT} ")
            for event, [definition] in hooks.items() for command in [definition["hooks"][0]["command"]]}


def test_gemini_cli_trusts_the_checkout_so_its_hooks_run_and_never_updates_itself() -> None:
    profile = profile_of("gemini")
    assert (profile.package, profile.command) == ("@google/gemini-cli", "gemini")
    assert profile.image_files[0][0] == "/etc/gemini-cli/settings.json"
    settings = _system_settings("gemini")
    assert settings["security"] == {"folderTrust": {"enabled": False}}
    assert settings["general"] == {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}
    assert _hook_states(settings) == {"SessionStart": "idle", "BeforeAgent": "busy", "BeforeTool": "busy",
                                      "AfterTool": "busy", "Notification": "asking", "AfterAgent": "waiting",
                                      "SessionEnd": "ended"}
    assert ("GEMINI_SANDBOX", "false") in profile.environment
    assert profile.session_command(["--yolo"]) == ["gemini", "--yolo"]


def test_qwen_code_reports_a_permission_question_and_never_updates_itself() -> None:
    profile = profile_of("qwen-code")
    assert (profile.package, profile.command) == ("@qwen-code/qwen-code", "qwen")
    assert profile.image_files[0][0] == "/etc/qwen-code/settings.json"
    settings = _system_settings("qwen-code")
    assert settings["general"] == {"enableAutoUpdate": False}
    assert settings["tools"] == {"useBuiltinRipgrep": False}, "the image's rg: the package's cannot be run"
    states = _hook_states(settings)
    assert states["PermissionRequest"] == "asking" and states["Stop"] == states["StopFailure"] == "waiting"
    assert states["UserPromptSubmit"] == states["PreToolUse"] == "busy" and states["SessionEnd"] == "ended"
    assert "Notification" not in states, "its notification after a turn's end is no question"
    assert ("QWEN_SANDBOX", "false") in profile.environment
    assert profile.session_command([]) == ["qwen"]


@pytest.mark.parametrize(("name", "variable", "host", "header"), [
    ("gemini", "GEMINI_API_KEY", "generativelanguage.googleapis.com", "x-goog-api-key"),
    ("qwen-code", "OPENAI_API_KEY", "api.openai.com", "authorization"),
    ("qwen-code", "DASHSCOPE_API_KEY", "dashscope.aliyuncs.com", "authorization"),
])
def test_each_agents_key_is_a_secret_for_its_provider_in_the_header_its_client_sends(
        name: str, variable: str, host: str, header: str) -> None:
    [secret] = implied_secrets(profile_of(name), (), lambda given: given == variable)
    assert secret.name == variable and host in [rule.text for rule in secret.hosts]
    assert secret.headers == (header,)


@pytest.mark.parametrize(("name", "folder"), [("gemini", ".gemini"), ("qwen-code", ".qwen")])
def test_the_checkouts_folder_of_the_agent_goes_over_the_users_configuration(name: str, folder: str) -> None:
    profile = profile_of(name)
    assert profile.checkout_config is not None
    assert (profile.checkout_config.host, profile.checkout_config.target) == (name, folder)
    assert all(source.target.startswith(f"{folder}/") for source in profile.config)
    assert not any("oauth" in source.host or "accounts" in source.host for source in profile.config), "no logins"


def test_a_credential_with_a_value_becomes_a_secret_for_its_providers_hosts_alone() -> None:
    claude = profile_of("claude-code")
    [secret] = implied_secrets(claude, (), lambda name: name == "ANTHROPIC_API_KEY")
    assert secret.name == "ANTHROPIC_API_KEY"
    assert [rule.text for rule in secret.hosts] == ["api.anthropic.com"] and secret.headers == ("x-api-key",)


def test_no_value_no_secret_and_the_users_own_secret_wins() -> None:
    claude = profile_of("claude-code")
    assert implied_secrets(claude, (), lambda name: False) == ()
    own = parse_secret("ANTHROPIC_API_KEY", ["models.example.org"])
    assert implied_secrets(claude, (own,), lambda name: True) == ()
    assert implied_secrets(profile_of("opencode"), (), lambda name: True) == ()


def test_the_agents_hosts_are_rules_of_the_network_policy() -> None:
    for profile in PROFILES.values():
        for host in profile.hosts:
            assert parse_rule(host).text == host


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("session\nbusy 1733300000000000000\n", AgentReport(True, AgentState.BUSY, 1733300000000000000)),
        ("session\nwaiting 12\n", AgentReport(True, AgentState.WAITING, 12)),
        ("none\nbusy 12\n", AgentReport(False, AgentState.BUSY, 12)),
        ("session\n", AgentReport(True)),
        ("", AgentReport(False)),
        ("session\nsleeping 12\n", AgentReport(True)),
        ("session\nbusy twelve\n", AgentReport(True)),
        ("session\nbusy 12 extra\n", AgentReport(True)),
        ("session\nbusy " + "9" * 400 + "\n", AgentReport(True)),
        ("session\nbusy -3\n", AgentReport(True)),
        ("sessions\nbusy 12\n", AgentReport(False, AgentState.BUSY, 12)),
        ("session 1000 997 960\nwaiting 12\n", AgentReport(True, AgentState.WAITING, 12, 3, 40, 997)),
        ("session 1000 1000 993\n", AgentReport(True, quiet_s=0, keys_s=7, printed_at_s=1000)),
        ("session 1000 1002 995\n", AgentReport(True, quiet_s=0, keys_s=5, printed_at_s=1002)),
        ("session 1000 997\n", AgentReport(True)),
        ("session 1000 997 960 1\n", AgentReport(True)),
        ("session 1000 997 x\n", AgentReport(True)),
        ("session 1000 -3 960\n", AgentReport(True)),
        ("session \u00b2 1 1\n", AgentReport(True)),
        ("session 1000 " + "9" * 13 + " 1\n", AgentReport(True)),
        ("none 1000 997 960\n", AgentReport(False)),
    ],
)
def test_the_report_is_read_as_untrusted_text(output: str, expected: AgentReport) -> None:
    assert parse_report(output) == expected


@pytest.mark.parametrize(
    ("report", "holds"),
    [
        (AgentReport(True, AgentState.BUSY, 1), True),
        (AgentReport(True, AgentState.WAITING, 1), False),
        (AgentReport(True, AgentState.ASKING, 1), False),
        (AgentReport(True, AgentState.IDLE, 1), False),
        (AgentReport(True, AgentState.ENDED, 1), False),
        (AgentReport(True), False),
        (AgentReport(False, AgentState.BUSY, 1), False),
    ],
)
def test_only_a_turn_in_progress_in_a_running_session_holds_the_vm(report: AgentReport, holds: bool) -> None:
    decision = decide_stop(as_activity(report, ActivitySource.HOOKS), StopMode.WAIT_FOR_QUIESCENCE, 10)
    assert decision.stop is not holds, decision.reason


@pytest.mark.parametrize(
    ("report", "holds"),
    [
        (AgentReport(True, quiet_s=0, keys_s=300), True),
        (AgentReport(True, quiet_s=QUIET_AFTER_S - 1, keys_s=300), True),
        (AgentReport(True, quiet_s=0, keys_s=0), True),
        (AgentReport(True, AgentState.WAITING, 1, quiet_s=0, keys_s=300), True),
        (AgentReport(True, quiet_s=QUIET_AFTER_S, keys_s=300), False),
        (AgentReport(True, AgentState.BUSY, 1, quiet_s=600, keys_s=900), False),
        (AgentReport(True, AgentState.BUSY, 1), False),
        (AgentReport(False, quiet_s=0, keys_s=300), False),
    ],
)
def test_without_hooks_a_session_that_printed_lately_holds_the_vm_whatever_the_hooks_file_says(
        report: AgentReport, holds: bool) -> None:
    decision = decide_stop(as_activity(report, ActivitySource.TERMINAL), StopMode.WAIT_FOR_QUIESCENCE, 10)
    assert decision.stop is not holds, decision.reason


def test_every_built_in_terminal_agent_names_its_logins_and_copies_none_of_them() -> None:
    """An agent of the user's own may not copy a built-in agent's login either (`core/agents/custom.py`)."""
    for profile in PROFILES.values():
        if profile.session is not SessionKind.TERMINAL:
            continue
        assert profile.logins, f"{profile.name} names where it keeps its logins"
        copied = [source.host for source in profile.config]
        for login in profile.logins:
            assert not [host for host in copied if host == login or login.startswith(f"{host}/")
                        or host.startswith(f"{login}/")], f"{profile.name} copies its login {login}"
