"""The application context: opened once per command with every flag, and the docker notice once."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.config.keys import KEYS
from opencode_sandbox.runtime.docker.description import NOTICE as DOCKER_NOTICE
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.select import make_runtime
from opencode_sandbox.ui.console import Console, LogLevel
from tests.cli.helpers import run_cli


@pytest.mark.docker
@pytest.mark.parametrize("command", [["shell", "-n"], ["sandbox", "run", "-n"]], ids=["fast path", "click"])
def test_the_configuration_is_loaded_and_reported_once_with_the_commands_flags(
    command: list[str], tmp_path: Path
) -> None:
    result = run_cli("--log-level", "verbose", "--runtime", "docker", *command, "--cpus", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = [line for line in result.stderr.splitlines() if line.startswith("config ")]
    assert [line.split()[1] for line in report] == [key.name for key in KEYS]
    assert "config cpus = 3  (flag --cpus)" in report
    assert "config runtime = docker  (flag --runtime)" in report
    assert result.stderr.count(DOCKER_NOTICE) == 1


@pytest.mark.parametrize("kind", list(RuntimeKind))
def test_making_a_runtime_prints_nothing(kind: RuntimeKind, capsys: pytest.CaptureFixture[str]) -> None:
    make_runtime(kind)
    assert capsys.readouterr() == ("", "")


def _opened(console: Console, folder: Path, runtime: str) -> App:
    return App.open(console, folder, {"runtime": runtime}, assume_yes=False, interactive=False)


def test_the_docker_notice_is_shown_once_per_process(tmp_path: Path) -> None:
    stream = io.StringIO()
    console = Console(LogLevel.INFO, stream=stream)
    for _ in range(2):
        assert _opened(console, tmp_path, "docker").runtime.kind is RuntimeKind.DOCKER
    assert stream.getvalue().count(DOCKER_NOTICE) == 1


def test_the_microsandbox_runtime_comes_without_a_notice(tmp_path: Path) -> None:
    stream = io.StringIO()
    assert _opened(Console(LogLevel.INFO, stream=stream), tmp_path, "microsandbox").runtime.kind is (
        RuntimeKind.MICROSANDBOX)
    assert DOCKER_NOTICE not in stream.getvalue()
