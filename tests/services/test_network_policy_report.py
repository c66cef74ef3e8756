"""The effective network policy, as `doctor` and `run --dry-run` show it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services.doctor import check_network
from tests.cli.helpers import run_cli

RULES = EgressPolicy(Profile.PUBLIC, (parse_rule("10.1.0.0/16"),), (parse_rule("203.0.113.0/24:22"),))


def test_a_policy_each_runtime_enforces_is_ok() -> None:
    for runtime in RuntimeKind:
        check = check_network(RULES, runtime)
        assert check.ok
        assert check.detail.startswith("public; egress-allow 10.1.0.0/16; egress-deny 203.0.113.0/24:22 (enforced by")


def test_allowlist_and_named_rules_go_through_the_proxy_on_docker() -> None:
    for policy in (EgressPolicy(Profile.ALLOWLIST), EgressPolicy(Profile.PUBLIC, deny=(parse_rule("evil.example"),))):
        proxied = check_network(policy, RuntimeKind.DOCKER)
        assert proxied.ok and "egress proxy (mitmproxy): only HTTP(S) through it" in proxied.detail
        assert check_network(policy, RuntimeKind.MICROSANDBOX).ok
    assert "nftables" in check_network(RULES, RuntimeKind.DOCKER).detail


def test_dind_fails_on_docker_only() -> None:
    failing = check_network(RULES, RuntimeKind.DOCKER, dind=True)
    assert not failing.ok and RuntimeKind.DOCKER in failing.required_for
    assert "Docker-in-Docker" in failing.detail and "microsandbox" in (failing.fix or "")
    assert check_network(RULES, RuntimeKind.MICROSANDBOX, dind=True).ok


def test_all_is_a_warning() -> None:
    check = check_network(EgressPolicy(Profile.ALL), RuntimeKind.DOCKER)
    assert not check.ok and check.required_for == frozenset()
    assert "no restriction" in check.detail


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / ".opencode-sandbox").mkdir()
    (folder / ".opencode-sandbox" / "config.yaml").write_text("egress-deny: [203.0.113.0/24:22]\n")
    return folder


def test_dry_run_shows_the_policy_with_the_flag_on_top(project: Path) -> None:
    result = run_cli("--runtime", "docker", "run", "--dry-run", "--network", "none", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "network: none; egress-deny 203.0.113.0/24:22" in result.stdout.splitlines()
    assert not any(line.startswith("proxy:") for line in result.stdout.splitlines())


def test_dry_run_names_the_proxy_when_docker_needs_one(project: Path) -> None:
    result = run_cli("--runtime", "docker", "run", "--dry-run", "--network", "allowlist", cwd=project)
    assert result.returncode == 0, result.stderr
    proxy = [line for line in result.stdout.splitlines() if line.startswith("proxy:")]
    assert len(proxy) == 1 and "opencode-sandbox-proxy-" in proxy[0] and "(mitmproxy) before the VM" in proxy[0]
    on_msb = run_cli("--runtime", "microsandbox", "run", "--dry-run", "--network", "allowlist", cwd=project)
    assert not any(line.startswith("proxy:") for line in on_msb.stdout.splitlines()), on_msb.stdout


def test_doctor_shows_the_policy_and_how_docker_enforces_allowlist(project: Path) -> None:
    result = run_cli("--runtime", "docker", "doctor", cwd=project,
                     env={"OPENCODE_SANDBOX_NETWORK": "allowlist"})
    lines = [line for line in result.stdout.splitlines() if "network" in line]
    assert lines and lines[0].startswith("ok   network allowlist; egress-deny 203.0.113.0/24:22 (enforced by the "
                                         "project's egress proxy"), lines


def test_doctor_refuses_a_policy_for_a_privileged_image_on_docker(project: Path) -> None:
    result = run_cli("--runtime", "docker", "doctor", cwd=project, env={"OPENCODE_SANDBOX_DIND": "true"})
    lines = [line for line in result.stdout.splitlines() if "network" in line]
    assert lines and lines[0].startswith("FAIL network public; egress-deny 203.0.113.0/24:22: a Docker-in-Docker")
    assert "microsandbox" in result.stdout
    assert result.returncode == 1
