from __future__ import annotations

from pathlib import Path

import click
import pytest

from opencode_sandbox.cli.main import cli
from tests.cli.helpers import run_cli


def walk(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            paths.extend(walk(sub, (*path, name)))
    return paths


ALL_COMMANDS = walk(cli)


def test_the_tree_has_every_command_of_the_checklist() -> None:
    expected = {
        ("run",), ("shell",), ("build",), ("build", "dockerfile"), ("list",), ("ls",),
        ("sandbox", "list"), ("sandbox", "prune"), ("sandbox", "run"), ("stop",), ("kill",), ("prune",),
        ("image", "list"), ("image", "build"), ("image", "prune"), ("volume", "list"),
        ("volume", "migrate"), ("volume", "reset"), ("volume", "edit"), ("volume", "prune"),
        ("doctor",), ("version",), ("completion",),
    }
    assert expected <= set(ALL_COMMANDS)


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "root")
def test_every_command_and_option_has_help(path: tuple[str, ...]) -> None:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    assert command.help, f"{path} has no help text"
    for parameter in command.params:
        if isinstance(parameter, click.Option):
            assert parameter.help, f"{path} option {parameter.opts} has no help text"


def test_help_runs_without_touching_config(tmp_path: Path) -> None:
    (tmp_path / ".opencode-sandbox").mkdir()
    (tmp_path / ".opencode-sandbox" / "config.yaml").write_text("cpus: [\n")
    result = run_cli("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "Usage: opencode-sandbox" in result.stdout
    for name in ("run", "shell", "build", "list", "prune", "volume", "doctor"):
        assert f"  {name} " in result.stdout


def test_version(tmp_path: Path) -> None:
    from opencode_sandbox import __version__

    result = run_cli("version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == f"opencode-sandbox {__version__}\n"


def test_a_bad_config_file_stops_every_command(tmp_path: Path) -> None:
    config = tmp_path / ".opencode-sandbox" / "config.yaml"
    config.parent.mkdir()
    config.write_text("cpus: 2\nauto-stop-timeout: soon\n")
    for args in (("version",), ("doctor",), ("list",), ()):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert f"error: {config}:2: invalid value for 'auto-stop-timeout'" in result.stderr
        assert "Traceback" not in result.stderr


def test_verbose_adds_the_traceback_and_sources(tmp_path: Path) -> None:
    config = tmp_path / ".opencode-sandbox" / "config.yaml"
    config.parent.mkdir()
    config.write_text("cpus: 3\n")
    good = run_cli("--log-level", "verbose", "version", cwd=tmp_path)
    assert f"config cpus = 3  ({config}:1)" in good.stderr
    assert "config memory = 4G  (default)" in good.stderr
    config.write_text("cpus: lots\n")
    bad = run_cli("--log-level", "verbose", "version", cwd=tmp_path)
    assert bad.returncode == 2
    assert "Traceback" in bad.stderr


def test_runtime_flag_is_validated(tmp_path: Path) -> None:
    result = run_cli("--runtime", "qemu", "version", cwd=tmp_path)
    assert result.returncode == 2
    assert "Invalid value for '--runtime'" in result.stderr


def test_unknown_option_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("list", "--bogus", cwd=tmp_path)
    assert result.returncode == 2
    assert "No such option '--bogus'" in result.stderr


def test_plain_folder_warns(tmp_path: Path) -> None:
    result = run_cli("version", cwd=tmp_path)
    assert result.returncode == 0
    assert f"warning: {tmp_path} is not inside a git repository" in result.stderr


def test_quiet_hides_warnings(tmp_path: Path) -> None:
    result = run_cli("-q", "version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stderr == ""


def test_completion_script(tmp_path: Path) -> None:
    result = run_cli("completion", "bash", cwd=tmp_path)
    assert result.returncode == 0
    assert "_OPENCODE_SANDBOX_COMPLETE=bash_complete" in result.stdout
    completions = run_cli(
        cwd=tmp_path,
        env={"_OPENCODE_SANDBOX_COMPLETE": "bash_complete", "COMP_WORDS": "opencode-sandbox vol",
             "COMP_CWORD": "1"},
    )
    assert "plain,volume" in completions.stdout
