"""The launcher's fast path reads `run` and `shell` lines exactly as click does, or declines them."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_sandbox.cli import actions
from opencode_sandbox.cli.fast_path import carry_out, recognise
from opencode_sandbox.cli.main import main as full_command_line

Call = tuple[str, dict[str, Any]]

WORDS = [
    "", "-", "--", "shell", "run", "list", "version", "true", "ls", "-la", "x y", "é",
    "-y", "--yes", "-q", "--quiet", "-yq", "-qy", "-h", "--help", "--version",
    "--log-level", "--log-level=verbose", "--log-level=VERBOSE", "--log-level=", "verbose", "error", "bogus",
    "--runtime", "--runtime=docker", "--runtime=vm", "docker", "microsandbox",
    "--root", "--root=1", "-r", "--rebuild", "-n", "--dry-run", "-nr", "--dry",
    "-c", "--cpus", "--cpus=3", "-c=3", "-c3", "3", " 4", "-1", "1_0", "abc",
    "-m", "--memory", "--memory=4G", "4G", "-w", "--worktree", "--worktree=fix:main", "feature/x",
    "-s", "--serve-only", "--network", "--network=none", "none", "public", "open",
    "-p", "--publish", "--publish=8080:3000", "-p=3000", "-p3000", "3000", "8080:3000",
]


class Recorder:
    """Stands in for the actions both readers call, noting each call with its arguments by name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[Call] = []
        for name in ("apply_global_flags", "run_project", "shell_in_project"):
            monkeypatch.setattr(actions, name, self._recording(name, getattr(actions, name)))

    def _recording(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(real)

        def record(*args: Any, **kwargs: Any) -> Any:
            arguments = dict(signature.bind(*args, **kwargs).arguments)
            arguments.pop("console" if name == "apply_global_flags" else "opener")
            self.calls.append((name, arguments))
            return 0 if name != "apply_global_flags" else object()

        return record

    def take(self) -> list[Call]:
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    yield Recorder(monkeypatch)


def exit_code(run: Callable[[], object]) -> int | str | None:
    with pytest.raises(SystemExit) as exited:
        run()
    code = exited.value.code
    return code if isinstance(code, int | str) or code is None else repr(code)


def read_by_click(argv: Sequence[str], recorder: Recorder) -> tuple[list[Call], int | str | None]:
    code = exit_code(lambda: full_command_line(list(argv)))
    return recorder.take(), code


def read_by_fast_path(argv: Sequence[str], recorder: Recorder) -> tuple[list[Call], int | str | None] | None:
    invocation = recognise(argv, {})
    if invocation is None:
        return None
    code = carry_out(invocation)
    return recorder.take(), code


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.sampled_from(WORDS), max_size=7))
def test_every_line_the_fast_path_takes_is_read_as_click_reads_it(
    argv: list[str], recorder: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = read_by_fast_path(argv, recorder)
    if fast is None:
        return
    assert fast == read_by_click(argv, recorder), argv
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], [("apply_global_flags", {"assume_yes": False, "quiet": False, "log_level": None, "runtime": None}),
              ("run_project", {"worktree": None, "rebuild": False, "dry_run": False, "cpus": None, "memory": None,
                               "network": None, "publish": (), "serve_only": False, "opencode_args": (),
                               "agent": None, "isolated": False})]),
        (["run", "--agent", "codex", "--", "--model", "o4"], [
            ("apply_global_flags", {"assume_yes": False, "quiet": False, "log_level": None, "runtime": None}),
            ("run_project", {"worktree": None, "rebuild": False, "dry_run": False, "cpus": None, "memory": None,
                             "network": None, "publish": (), "serve_only": False, "opencode_args": ("--model", "o4"),
                             "agent": "codex", "isolated": False})]),
        (["shell", "--", "true"], [
            ("apply_global_flags", {"assume_yes": False, "quiet": False, "log_level": None, "runtime": None}),
            ("shell_in_project", {"root": False, "rebuild": False, "dry_run": False, "cpus": None, "memory": None,
                                  "network": None, "publish": (), "command": ("true",), "agent": None,
                                  "isolated": False})]),
        (["-q", "--runtime", "docker", "shell", "--root", "-c", "4", "--memory=8G", "--network", "none", "-p", "3000",
          "--publish=8080:80", "--", "ls", "-la", "--root"], [
            ("apply_global_flags", {"assume_yes": False, "quiet": True, "log_level": None, "runtime": "docker"}),
            ("shell_in_project", {"root": True, "rebuild": False, "dry_run": False, "cpus": 4, "memory": "8G",
                                  "network": "none", "publish": ("3000", "8080:80"),
                                  "command": ("ls", "-la", "--root"), "agent": None, "isolated": False})]),
        (["--log-level=verbose", "-y", "-w", "feature/login:main", "-s", "--", "--model", "x"], [
            ("apply_global_flags", {"assume_yes": True, "quiet": False, "log_level": "verbose", "runtime": None}),
            ("run_project", {"worktree": "feature/login:main", "rebuild": False, "dry_run": False, "cpus": None,
                             "memory": None, "network": None, "publish": (), "serve_only": True,
                             "opencode_args": ("--model", "x"), "agent": None, "isolated": False})]),
    ],
)
def test_the_common_lines_take_the_fast_path_and_match_click(
    argv: list[str], expected: list[Call], recorder: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    assert read_by_fast_path(argv, recorder) == (expected, 0)
    assert read_by_click(argv, recorder) == (expected, 0)


@pytest.mark.parametrize(
    "words",
    [[], ["-w", "feature/login:main", "-s", "--", "--model", "x"], ["-n", "-c", "3", "--memory=8G"], ["-r"],
     ["--cpus", "two"], ["-q"]],
)
def test_sandbox_run_is_run(words: list[str], recorder: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    """The spec's other spelling: the same options, the same work, the same failures."""
    assert recognise(["sandbox", "run", *words], {}) is None
    as_run = read_by_click(["-y", "run", *words], recorder)
    run_failure = capsys.readouterr().err
    assert read_by_click(["-y", "sandbox", "run", *words], recorder) == as_run
    assert capsys.readouterr().err == run_failure.replace("opencode-sandbox run", "opencode-sandbox sandbox run")


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["shell", "-h"], ["--version"], ["list"], ["shell", "ls"], ["shell", "-nr"], ["-yq", "shell"],
     ["shell", "-c", "two"], ["shell", "-c"], ["shell", "-c2"], ["--runtime", "vm", "shell"], ["run", "-q"],
     ["shell", "--memory", "-n"], ["--log-level", "VERBOSE"], ["shell", "--root=yes"], ["foo", "--", "x"],
     ["--network=open"]],
)
def test_help_other_commands_and_unusual_spellings_go_to_click(argv: list[str]) -> None:
    assert recognise(argv, {}) is None


def test_shell_completion_goes_to_click() -> None:
    assert recognise([], {}) is not None
    assert recognise([], {"_OPENCODE_SANDBOX_COMPLETE": "bash_complete"}) is None


def test_failures_are_reported_alike_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENCODE_SANDBOX_CPUS", "many")
    invocation = recognise(["shell", "-n"], {})
    assert invocation is not None
    fast_code = carry_out(invocation)
    fast_output = capsys.readouterr()
    click_code = exit_code(lambda: full_command_line(["shell", "-n"]))
    click_output = capsys.readouterr()
    assert fast_code == click_code == 2
    assert "OPENCODE_SANDBOX_CPUS" in fast_output.err
    assert (fast_output.out, fast_output.err) == (click_output.out, click_output.err)


def test_a_shell_on_the_fast_path_never_loads_click(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "opencode_sandbox", "--runtime", "docker", "shell", "-n"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "daemon: leave (a shell needs no server)" in result.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "opencode_sandbox.cli.fast_path" in imported
    assert not {name for name in imported if name == "click" or name.startswith("click.")}


def test_a_start_of_the_default_agent_loads_no_other_agents_profile(tmp_path: Path) -> None:
    """The built-in profiles load one module each when asked for; opencode's start needs no other."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "opencode_sandbox", "--runtime", "docker", "shell", "-n"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60,
        env={key: value for key, value in os.environ.items() if key != "OPENCODE_SANDBOX_AGENT"},
    )
    assert result.returncode == 0, result.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "opencode_sandbox.core.agents" in imported
    assert {name for name in imported if name.startswith("opencode_sandbox.core.agents.")} <= {
        "opencode_sandbox.core.agents.profile", "opencode_sandbox.core.agents.opencode"}


WARM_PATH_MODULES = [
    "opencode_sandbox.launcher", "opencode_sandbox.cli.fast_path", "opencode_sandbox.cli.actions",
    "opencode_sandbox.app", "opencode_sandbox.engine.docker", "opencode_sandbox.services.start.client",
    "opencode_sandbox.services.start.pipeline", "opencode_sandbox.services.start.daemon",
    "opencode_sandbox.runtime.select",
    "opencode_sandbox.runtime.docker.backend",
    "opencode_sandbox.daemon.health", "opencode_sandbox.state.leases", "opencode_sandbox.services.reaper_spawn",
    "opencode_sandbox.runtime.docker.description", "opencode_sandbox.guest.shell", "opencode_sandbox.state_layout",
    "opencode_sandbox.services.start.checks", "opencode_sandbox.services.start.vm_step",
    "opencode_sandbox.services.start.provision", "opencode_sandbox.cli.terminal",
    "opencode_sandbox.services.vm_git", "opencode_sandbox.services.guard.reviews", "opencode_sandbox.services.stopping",
    "opencode_sandbox.runtime.docker.network_holder",
]
KEPT_OFF_THE_WARM_PATH = ["click", "typing", "dataclasses", "inspect", "uuid", "hashlib", "tempfile", "logging",
                          "yaml", "httpx", "rich", "ctypes", "shutil"]
"""`subprocess` is on the path: git is asked once where the checkout's git directory and hooks are,
for the git sync and the guard."""


def test_the_warm_path_loads_none_of_the_heavy_modules() -> None:
    probe = (f"import sys\nfor name in {WARM_PATH_MODULES!r}:\n    __import__(name)\n"
             "from opencode_sandbox.cli.terminal import terminal_console\nterminal_console().verbose('made')\n"
             f"print(sorted(name for name in {KEPT_OFF_THE_WARM_PATH!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"
