"""Malformed configuration, environment, state and update files, and odd git remotes.

The bulk runs the real command line in-process (`main`, output captured, the exit code from
`SystemExit`); a handful of cases run it as a subprocess too. Bad user input ends with exit
code 2 and a message naming the file or variable; a corrupt state or update file is not user
input: it is named in a warning and the command goes on.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from opencode_sandbox.cli import main as cli_main
from opencode_sandbox.cli.main import main
from opencode_sandbox.config.keys import KEYS
from opencode_sandbox.core.naming import MAX_NAME_LENGTH, home_volume_name, runner_image, vm_name
from opencode_sandbox.core.slug import slug_for_remote
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.state_layout import StateLayout
from opencode_sandbox.ui.console import LogLevel
from tests.cli.helpers import run_cli
from tests.services.engine_artifacts import docker_answers

SLUG_SHAPE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# Each example rewrites and removes its own file, so sharing the test's fixtures is safe.
SHARED_FIXTURES = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=SHARED_FIXTURES)


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def invoke(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Outcome:
    """The real command line in this process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    # The console is one per process; an earlier in-process `--log-level` must not carry over.
    cli_main._console.level = LogLevel.INFO
    # Without logging configured, Python prints warnings to stderr; pytest installs its own handlers.
    to_stderr = logging.StreamHandler(err)
    logging.getLogger().addHandler(to_stderr)
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with environment(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
    finally:
        os.chdir(previous)
        logging.getLogger().removeHandler(to_stderr)
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_no_traceback(outcome: Outcome) -> None:
    assert "Traceback" not in outcome.stderr + outcome.stdout
    assert "unexpected failure" not in outcome.stderr


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    folder = tmp_path / "checkout"
    folder.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "remote", "add", "origin", "git@example.org:team/fuzzed.git"], cwd=folder, check=True)
    return folder


def config_paths(checkout: Path) -> list[Path]:
    config_dir = ToolPaths.from_environment().config_dir
    return [
        config_dir / "config.yaml",
        config_dir / slug_for_remote("git@example.org:team/fuzzed.git") / "config.yaml",
        checkout / ".opencode-sandbox" / "config.yaml",
    ]


def rejected(key_name: str, value: object) -> bool:
    key = next(key for key in KEYS if key.name == key_name)
    try:
        key.read(value)
    except Exception:
        return True
    return False


KEY_NAMES = [key.name for key in KEYS]
BROKEN_YAML = st.sampled_from([
    "cpus: [1, 2\n", "memory: '4G\n", "cpus: 2\n  memory: 4G\n bad", "a: b: c\n", "- [\n", "cpus: {\n",
    "key: @value\n", "\tcpus: 2\n", "cpus: 2\ncpus 3\n]", "? [\n", "runtime: !!binary zz\n",
    "cpus: *anchor\n", "%YAML 9.9\n---\ncpus: 2\n",
])
UNKNOWN_KEYS = st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True).filter(lambda name: name not in KEY_NAMES)
WRONG_TYPES = st.tuples(st.sampled_from(KEY_NAMES), st.sampled_from([{"nested": 1}, [1, 2], [[]], {"a": [1]}]))
OUT_OF_RANGE = st.sampled_from([
    ("cpus", 0), ("cpus", -1), ("cpus", 100_000), ("cpus", "two"), ("cpus", 2.5), ("memory", "100M"),
    ("memory", "0G"), ("memory", "-4G"), ("memory", 4096), ("memory", "4 parsecs"), ("runtime", "qemu"),
    ("runtime", True), ("auto-stop-timeout", "-5s"), ("auto-stop-timeout", "soon"), ("auto-prune-age", "30 weeks"),
    ("auto-stop-max-session-retries", -1), ("auto-stop-max-session-retries", 10**9), ("dind", "maybe"),
    ("trust-host-ca", 3), ("releases-url", "ftp://example.org"), ("releases-url", 42), ("manual-prune-age", []),
    ("extra-ca-certificates", [""]), ("auto-stop-on-active-sessions", None),
])


@st.composite
def malformed_config(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["syntax", "unknown", "type", "range", "binary", "not-a-mapping"]))
    if kind == "syntax":
        return draw(BROKEN_YAML).encode()
    if kind == "unknown":
        return f"cpus: 2\n{draw(UNKNOWN_KEYS)}: {draw(st.integers())}\n".encode()
    if kind in ("type", "range"):
        name, value = draw(WRONG_TYPES if kind == "type" else OUT_OF_RANGE)
        assume(rejected(name, value))
        return yaml.safe_dump({name: value}).encode()
    if kind == "binary":
        return draw(st.binary(min_size=1, max_size=64)) + b"\xff\xfe\x00"
    return draw(st.sampled_from([b"- cpus: 2\n", b"just text\n", b"42\n", b"[1, 2]\n"]))


@FUZZ
@given(content=malformed_config(), layer=st.integers(0, 2))
def test_a_malformed_config_file_is_named_and_exits_2(checkout: Path, content: bytes, layer: int) -> None:
    path = config_paths(checkout)[layer]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    try:
        outcome = invoke(["version"], checkout)
    finally:
        path.unlink()
    assert_no_traceback(outcome)
    assert outcome.code == 2, outcome
    assert outcome.stderr.startswith(f"error: {path}"), outcome.stderr
    assert "hint: " in outcome.stderr


@st.composite
def bad_environment(draw: st.DrawFn) -> tuple[str, str]:
    if draw(st.booleans()):
        suffix = draw(st.from_regex(r"[A-Z0-9_]{1,20}", fullmatch=True))
        variable = "OPENCODE_SANDBOX_" + suffix
        assume(variable not in {key.env_variable for key in KEYS})
        # No surrogates: an environment holds no text that UTF-8 cannot encode.
        return variable, draw(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
                                      max_size=20))
    key = draw(st.sampled_from(KEYS))
    value = draw(st.one_of(
        st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=20),
        st.sampled_from(["-1", "0", "", " ", "1e9", "4 G", "ten", "yes please", "-5s", "file:///etc"]),
    ))
    assume(rejected(key.name, value))
    return key.env_variable, value


@FUZZ
@given(variable_and_value=bad_environment())
def test_a_bad_environment_value_is_named_and_exits_2(checkout: Path, variable_and_value: tuple[str, str]) -> None:
    variable, value = variable_and_value
    outcome = invoke(["version"], checkout, env={variable: value})
    os.environ.pop(variable, None)
    assert_no_traceback(outcome)
    assert outcome.code == 2, outcome
    assert variable in outcome.stderr.splitlines()[0], outcome.stderr


CORRUPT_STATE = st.one_of(
    st.binary(min_size=1, max_size=48).map(lambda data: data + b"\xff"),
    st.sampled_from([b"home_volume: [1\n", b"- a\n- b\n", b"home_volume: 42\n", b"home_volume: {a: 1}\n",
                     b"image_digest: [x]\n", b"just a line\n", b"{: }\n"]),
)
CORRUPT_UPDATER = st.one_of(
    st.binary(min_size=1, max_size=48).map(lambda data: data + b"\xff"),
    st.sampled_from([b"baked_version: [1\n", b"- a\n", b"last_check: yesterday\n", b"plain text\n", b"[1, 2]\n",
                     b"last_check: 2026-13-45T99:00:00\n"]),
)


def docker_dry_run(checkout: Path) -> Outcome:
    return invoke(["--runtime", "docker", "shell", "--dry-run"], checkout)


needs_docker = pytest.mark.skipif(not docker_answers(), reason="the Docker engine is not answering")


@pytest.mark.docker
@needs_docker
@settings(max_examples=30, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(content=CORRUPT_STATE)
def test_a_corrupt_state_file_is_named_in_a_warning_and_the_command_goes_on(checkout: Path, content: bytes) -> None:
    layout = StateLayout(ToolPaths.from_environment().state_dir)
    path = layout.project(slug_for_remote("git@example.org:team/fuzzed.git")).state
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    outcome = docker_dry_run(checkout)
    assert_no_traceback(outcome)
    assert outcome.code == 0, outcome
    assert f"warning: {path}: unusable state file" in outcome.stderr
    assert "home volume: create (a new one from the image)" in outcome.stdout


@pytest.mark.docker
@needs_docker
@settings(max_examples=30, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(content=CORRUPT_UPDATER)
def test_a_corrupt_update_file_is_named_in_a_warning_and_the_command_goes_on(checkout: Path, content: bytes) -> None:
    path = ToolPaths.from_environment().state_dir / "updater.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    outcome = docker_dry_run(checkout)
    assert_no_traceback(outcome)
    assert outcome.code == 0, outcome
    assert str(path) in outcome.stderr and "starting fresh" in outcome.stderr, outcome.stderr
    assert "vm: create" in outcome.stdout


ODD_REMOTES = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["", "/", ":", "git@:", "https://", "file:///", "..", "git@host:../../..", "ssh://[::1]/x.git",
                     "https://user:pa:ss@host/a b/c.git", "git@host:" + "x" * 400 + ".git", "🙂:🙂/🙂.git",
                     "\\\\server\\share\\repo", "git@host:.git", "https://host/-/-/-.git"]),
)


@settings(max_examples=300, deadline=None)
@given(remote=ODD_REMOTES)
def test_any_remote_gives_a_valid_slug_and_bounded_names(remote: str) -> None:
    slug = slug_for_remote(remote)
    assert SLUG_SHAPE.fullmatch(slug), slug
    for name in (vm_name(slug), home_volume_name(slug), runner_image(slug, "0" * 16)):
        assert len(name) <= MAX_NAME_LENGTH, name
        assert name.isascii()


@pytest.mark.parametrize("remote", ["git@host:" + "y" * 300 + ".git", "https://host/ü n/ï.git", "weird remote ::",
                                    "ssh://git@host:22/--.git"])
def test_odd_remotes_through_the_command_line(tmp_path: Path, remote: str) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "remote", "add", "origin", remote], cwd=tmp_path, check=True)
    result = run_cli("--log-level", "verbose", "version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("project ")]
    slug = line.split()[1]
    assert slug == slug_for_remote(remote) and SLUG_SHAPE.fullmatch(slug)
    assert len(vm_name(slug)) <= MAX_NAME_LENGTH


@pytest.mark.parametrize(("setup", "expected"), [
    ("config", "malformed YAML"),
    ("env", "OPENCODE_SANDBOX_CPUS"),
])
def test_bad_input_through_a_subprocess(checkout: Path, setup: str, expected: str) -> None:
    env: dict[str, str] = {}
    if setup == "config":
        path = config_paths(checkout)[2]
        path.parent.mkdir(parents=True)
        path.write_text("cpus: [1\n")
        expected = f"{path}:2: {expected}"
    else:
        env["OPENCODE_SANDBOX_CPUS"] = "-4"
    result = run_cli("--runtime", "docker", "shell", "--", "true", cwd=checkout, env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert expected in result.stderr.splitlines()[0]


@pytest.mark.docker
@needs_docker
def test_corrupt_state_and_update_files_through_a_subprocess(checkout: Path) -> None:
    state_dir = ToolPaths.from_environment().state_dir
    path = StateLayout(state_dir).project(slug_for_remote("git@example.org:team/fuzzed.git")).state
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00\xff garbage")
    (state_dir / "updater.yaml").write_text("last_check: [1, 2\n")
    result = run_cli("--runtime", "docker", "shell", "--dry-run", cwd=checkout)
    assert result.returncode == 0, result.stderr
    assert f"warning: {path}: unusable state file" in result.stderr
    assert f"ignoring corrupt {state_dir / 'updater.yaml'}" in result.stderr
    assert "Traceback" not in result.stderr
