"""The console script's process set-up around the command line."""

from __future__ import annotations

import gc
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from opencode_sandbox import launcher

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_script_and_module_run_the_launcher() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"opencode-sandbox": "opencode_sandbox.launcher:main"}
    assert "from opencode_sandbox.launcher import main" in (ROOT / "src/opencode_sandbox/__main__.py").read_text()


def test_the_launcher_runs_the_command_and_leaves_nothing_to_collect(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["opencode-sandbox", "version"])
    try:
        with pytest.raises(SystemExit) as exited:
            launcher.main()
        assert exited.value.code == 0
        assert capsys.readouterr().out.startswith("opencode-sandbox ")
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_errors_keep_their_exit_code_through_the_launcher(tmp_path: Path) -> None:
    bad = tmp_path / "config"
    (bad / "opencode-sandbox").mkdir(parents=True)
    (bad / "opencode-sandbox" / "config.yaml").write_text("cpus: -1\n")
    result = subprocess.run(
        [sys.executable, "-m", "opencode_sandbox", "version"], cwd=tmp_path, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(bad),
             "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
             "MSB_HOME": str(tmp_path / "msb")},
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "cpus" in result.stderr and "Traceback" not in result.stderr


def test_the_fast_path_flushes_its_output_and_keeps_its_exit_code(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    planned = subprocess.run([sys.executable, "-m", "opencode_sandbox", "--runtime", "docker", "shell", "-n"],
                             cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines()[-1] == "daemon: leave (a shell needs no server)"
    refused = subprocess.run([sys.executable, "-m", "opencode_sandbox", "--runtime", "docker", "shell", "-c", "0"],
                             cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60)
    assert refused.returncode == 2
    assert "cpus" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("args", [["--runtime", "docker", "shell", "-n"], ["build", "dockerfile"]],
                         ids=["fast-path", "click"])
def test_output_whose_reader_left_ends_quietly(tmp_path: Path, args: list[str]) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    process = subprocess.Popen([sys.executable, "-m", "opencode_sandbox", "-q", *args], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    errors = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1
    assert errors == ""
