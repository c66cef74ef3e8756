"""`secrets list`, `secrets import`, and the secrets in `doctor` and `run --dry-run`, through the
real command line: names, hosts and sources, never a value."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.cli.helpers import run_cli

VALUE = "sk-distinctive-c0ffee-4242"
LOGINS = {
    "openai": {"type": "api", "key": VALUE},
    "anthropic": {"type": "api", "key": VALUE + "-anthropic"},
    "github-copilot": {"type": "oauth", "refresh": "ghr-refresh", "access": "gho-access", "expires": 1},
    "acme-llm": {"type": "api", "key": "acme-key"},
}


def config_dir() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "opencode-sandbox"


def auth_file() -> Path:
    return Path(os.environ["XDG_DATA_HOME"]) / "opencode" / "auth.json"


def write_logins(logins: dict[str, object]) -> Path:
    path = auth_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(logins))
    path.chmod(0o600)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


def test_import_writes_values_privately_and_names_and_hosts_to_the_config(project: Path) -> None:
    write_logins(LOGINS)
    config = config_dir() / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("# my settings\ncpus: 3\n")
    result = run_cli("secrets", "import", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "openai -> OPENAI_API_KEY, anthropic -> ANTHROPIC_API_KEY" in result.stderr
    assert "unknown provider(s): acme-llm" in result.stderr
    assert "refreshable login(s): github-copilot" in result.stderr and "log in inside the sandbox" in result.stderr
    values = config_dir() / "secrets.env"
    assert stat.S_IMODE(values.stat().st_mode) == 0o600
    assert f'OPENAI_API_KEY="{VALUE}"' in values.read_text().splitlines()
    assert "acme-key" not in values.read_text() and "ghr-refresh" not in values.read_text()
    written = config.read_text()
    assert written.startswith("# my settings\ncpus: 3\nsecrets:\n")
    assert VALUE not in written
    assert json.loads(auth_file().read_text()) == LOGINS  # opencode's own file is left as it is

    listed = run_cli("secrets", "list", "--format", "json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["result"] == [
        {"name": "OPENAI_API_KEY", "hosts": ["api.openai.com"], "headers": ["authorization"], "source": str(values)},
        {"name": "ANTHROPIC_API_KEY", "hosts": ["api.anthropic.com"], "headers": ["x-api-key"],
         "source": str(values)},
    ]
    again = run_cli("secrets", "import", cwd=project)
    assert again.returncode == 0 and "(already there)" in again.stderr
    assert config.read_text() == written


def secrets_already_set(openai_hosts: str) -> tuple[Path, Path]:
    """A user with a new OpenAI key in opencode's logins, and two secrets set before: the user's
    `config.yaml` and `secrets.env`."""
    write_logins({"openai": {"type": "api", "key": "sk-new"}})
    config = config_dir() / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"secrets:\n  CORP_TOKEN: ['*.corp.example']\n  OPENAI_API_KEY: [{openai_hosts}]\n"
                      "# trailing\nmemory: 8G\n")
    values = config_dir() / "secrets.env"
    values.write_text("CORP_TOKEN=corp-value\nOPENAI_API_KEY=sk-old\n")
    values.chmod(0o600)
    return config, values


def test_import_merges_with_secrets_already_set(project: Path) -> None:
    config, values = secrets_already_set("gateway.corp.example")
    result = run_cli("secrets", "import", cwd=project)
    assert result.returncode == 0, result.stderr
    listed = run_cli("secrets", "list", cwd=project)
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "HOSTS", "HEADERS", "SOURCE"]
    assert lines[1].split() == ["CORP_TOKEN", "*.corp.example", "any", str(values)]
    assert lines[2].split() == ["OPENAI_API_KEY", "gateway.corp.example", "any", str(values)]  # the user's hosts
    assert "memory: 8G" in config.read_text()
    assert "OPENAI_API_KEY already set" in result.stderr and "for other hosts" in result.stderr
    assert values.read_text() == "CORP_TOKEN=corp-value\nOPENAI_API_KEY=sk-old\n"  # never sent to the gateway


def test_import_refreshes_a_key_set_for_the_provider_s_own_hosts(project: Path) -> None:
    config, values = secrets_already_set("api.openai.com")
    result = run_cli("secrets", "import", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "(already there)" in result.stderr
    assert 'CORP_TOKEN="corp-value"' in values.read_text() and 'OPENAI_API_KEY="sk-new"' in values.read_text()
    assert "memory: 8G" in config.read_text()


def test_import_without_logins_says_what_to_do(project: Path) -> None:
    result = run_cli("secrets", "import", cwd=project)
    assert result.returncode == 2
    assert f"{auth_file()} does not exist" in result.stderr and "hint:" in result.stderr
    write_logins({"github-copilot": {"type": "oauth", "refresh": "r"}})
    result = run_cli("secrets", "import", cwd=project)
    assert result.returncode == 0
    assert "No API key of a known provider" in result.stderr
    assert not (config_dir() / "secrets.env").exists()


def test_list_shows_where_each_value_comes_from_never_the_value(project: Path) -> None:
    env = {"OPENCODE_SANDBOX_SECRETS": "FROM_ENV=api.example.com;UNSET_TOKEN[x-api-key]=*.example.org",
           "FROM_ENV": VALUE}
    result = run_cli("secrets", "list", cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert rows == [["FROM_ENV", "api.example.com", "any", "environment"],
                    ["UNSET_TOKEN", "*.example.org", "x-api-key", "missing"]]
    assert VALUE not in result.stdout + result.stderr


def test_a_values_file_others_can_read_is_refused(project: Path) -> None:
    values = config_dir() / "secrets.env"
    values.parent.mkdir(parents=True)
    values.write_text(f"FROM_FILE={VALUE}\n")
    values.chmod(0o644)
    result = run_cli("secrets", "list", cwd=project, env={"OPENCODE_SANDBOX_SECRETS": "FROM_FILE=api.example.com"})
    assert result.returncode == 2
    assert f"{values} can be read or changed by other users (mode 644)" in result.stderr
    assert f"hint: run `chmod 600 {values}`" in result.stderr
    assert VALUE not in result.stdout + result.stderr


def test_doctor_and_dry_run_show_names_hosts_and_sources(project: Path) -> None:
    write_logins({"openai": {"type": "api", "key": VALUE}, "github-copilot": {"type": "oauth", "refresh": "r"}})
    env = {"OPENCODE_SANDBOX_SECRETS": "OPENAI_API_KEY[authorization]=api.openai.com;UNSET_TOKEN=api.example.com",
           "OPENAI_API_KEY": VALUE}
    doctor = run_cli("--runtime", "microsandbox", "doctor", cwd=project, env=env)
    lines = doctor.stdout.splitlines()
    assert ("ok   secrets OPENAI_API_KEY -> api.openai.com (headers authorization) (value from environment; the VM "
            "sees a placeholder)") in lines
    assert any(line.startswith("FAIL secrets UNSET_TOKEN -> api.example.com: no value (looked in environment, ")
               for line in lines)
    assert any(line.startswith("warn logins  the login(s) of github-copilot in") for line in lines)
    assert not any("API key(s) of openai" in line for line in lines)  # a secret: not copied
    assert doctor.returncode == 1
    plan = run_cli("--runtime", "microsandbox", "run", "--dry-run", cwd=project, env=env)
    assert plan.returncode == 0, plan.stderr
    assert "secret: OPENAI_API_KEY -> api.openai.com (headers authorization); value from environment" in plan.stdout
    assert "secret: UNSET_TOKEN -> api.example.com; value from missing" in plan.stdout
    assert VALUE not in doctor.stdout + doctor.stderr + plan.stdout + plan.stderr


def test_docker_doctor_says_the_egress_proxy_keeps_the_secrets(project: Path) -> None:
    env = {"OPENCODE_SANDBOX_SECRETS": "OPENAI_API_KEY=api.openai.com", "OPENAI_API_KEY": VALUE}
    doctor = run_cli("--runtime", "docker", "doctor", cwd=project, env=env)
    network = [line for line in doctor.stdout.splitlines() if " network " in f" {line} "]
    assert network and network[0].startswith("ok") and "the project's egress proxy" in network[0], doctor.stdout
    assert VALUE not in doctor.stdout + doctor.stderr


def test_import_keeps_a_symlinked_config_a_symlink(project: Path, tmp_path: Path) -> None:
    write_logins({"openai": {"type": "api", "key": VALUE}})
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "config.yaml").write_text("cpus: 3\n")
    config = config_dir() / "config.yaml"
    config.parent.mkdir(parents=True)
    config.symlink_to(dotfiles / "config.yaml")
    result = run_cli("secrets", "import", cwd=project)
    assert result.returncode == 0, result.stderr
    assert config.is_symlink()
    assert (dotfiles / "config.yaml").read_text().startswith("cpus: 3\nsecrets:\n  OPENAI_API_KEY:")
