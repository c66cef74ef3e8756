"""`run -n` refuses every input a real run refuses, with the same message, and plans the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import run_cli

BAD_INPUTS = [
    (["-w", "../x"], "error: invalid worktree name '../x'"),
    (["-w", "Feature"], "error: invalid worktree name 'Feature'"),
    (["-w", "fix:"], "error: no base after ':' in 'fix:'"),
    (["-c", "0"], "error: flag --cpus: invalid value for 'cpus': 0 is out of range"),
    (["-m", "1K"], "error: flag --memory: invalid value for 'memory': '1K' is below the minimum of 512M"),
    (["-p", "4096"], "error: flag --publish: invalid value for 'ports': '4096': guest port 4096 is opencode serve's"),
    (["-p", "70000:80"], "error: flag --publish: invalid value for 'ports': '70000:80': 70000 is outside 1 to 65535"),
    (["--agent", "codex", "-w", "fix"], "error: worktrees (-w) are opencode's; Codex works in the checkout"),
    (["--agent", "gemini", "--serve-only"], "error: --serve-only starts opencode's server; Gemini CLI has none"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_INPUTS, ids=[" ".join(flags) for flags, _ in BAD_INPUTS])
def test_a_dry_run_refuses_what_a_real_run_refuses(flags: list[str], message: str, tmp_path: Path) -> None:
    # Without a terminal a real run that took the input would stop at `opencode attach`,
    # before it changed anything.
    real = run_cli("--runtime", "docker", "run", *flags, cwd=tmp_path)
    dry = run_cli("--runtime", "docker", "run", "--dry-run", *flags, cwd=tmp_path)
    assert real.returncode == 2
    assert message in real.stderr
    assert (dry.returncode, dry.stderr) == (real.returncode, real.stderr)
    assert dry.stdout == ""


@pytest.mark.docker
def test_a_dry_run_plans_the_worktree(tmp_path: Path) -> None:
    result = run_cli("--runtime", "docker", "run", "-n", "-w", "feature/login:main", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "worktree: use feature/login, or create it from main if it does not exist"
    )


@pytest.mark.docker
def test_a_terminal_agents_dry_run_plans_its_session_and_no_server(tmp_path: Path) -> None:
    result = run_cli("--runtime", "docker", "run", "-n", "--agent", "codex", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "session: attach (Codex's session in the VM, started first when none runs; it outlives " \
                        "this terminal)"
    assert not [line for line in lines if line.startswith("daemon:") or "opencode configuration" in line], \
        "Codex's start neither starts opencode serve nor copies opencode's configuration"
    assert [line for line in lines if line.startswith("provisioning:")] == [
        "provisioning: keep (no Codex configuration on this host to copy)"]


@pytest.mark.docker
def test_a_dry_run_lists_the_mounts_and_ports_and_refuses_a_missing_source(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    project = tmp_path / "project"  # a mount inside the project's folder would be refused
    project.mkdir()
    mounts = {"OPENCODE_SANDBOX_MOUNTS": f"{tmp_path / 'shared'}:/mnt/shared;{tmp_path / 'shared'}:/mnt/out:rw"}
    result = run_cli("--runtime", "docker", "run", "-n", "-p", "3000", "-p", "8080:80", cwd=project, env=mounts)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"mount: {tmp_path / 'shared'} -> /mnt/shared (read-only)" in lines
    assert f"mount: {tmp_path / 'shared'} -> /mnt/out (read-write)" in lines
    assert "port: guest 3000 -> 127.0.0.1:a free port" in lines and "port: guest 80 -> 127.0.0.1:8080" in lines
    missing = run_cli("--runtime", "docker", "run", "-n", cwd=project,
                      env={"OPENCODE_SANDBOX_MOUNTS": f"{tmp_path / 'absent'}:/mnt/x"})
    assert missing.returncode == 2
    assert f"{tmp_path / 'absent'} does not exist on this host" in missing.stderr
