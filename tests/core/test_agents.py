"""The agents' profiles: what each says, the credentials that become secrets, and the report a
terminal agent's session and hooks give, read as the untrusted text it is."""

from __future__ import annotations

import json
import tomllib

import pytest

from opencode_sandbox.cli.option_table import AGENT_NAMES
from opencode_sandbox.core.agent_activity import AgentReport, AgentState, as_activity, parse_report
from opencode_sandbox.core.agents import DEFAULT_AGENT, PROFILES, SessionKind, implied_secrets, profile_of
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


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_a_terminal_agent_is_installed_from_npm_and_reports_its_turns_through_hooks(name: str) -> None:
    profile = profile_of(name)
    assert profile.session is SessionKind.TERMINAL
    assert profile.package.startswith("@") and profile.command
    assert profile.credentials
    assert all(set(credential.hosts) <= set(profile.hosts) for credential in profile.credentials)
    [(path, content)] = profile.image_files
    assert path.startswith("/etc/")
    commands = (json.dumps(json.loads(content)) if path.endswith(".json")
                else json.dumps(tomllib.loads(content)))
    for state in ("busy", "waiting", "asking"):
        assert f"{AGENT_EVENT} {state}" in commands, f"{name} reports {state}"


def test_the_codex_session_leaves_the_sandboxing_to_the_vm_and_takes_the_users_arguments_last() -> None:
    assert profile_of("codex").session_command(["--model", "x"]) == [
        "codex", "--sandbox", "danger-full-access", "--model", "x"]
    assert profile_of("claude-code").session_command([]) == ["claude"]


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
