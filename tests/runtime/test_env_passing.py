"""Environment values reach `docker` and `msb` through their environment, never their command line.

The backends are run against recording wrappers of the real programs: a wrapper writes down
its argument list and the environment it was given, then hands over to the real `docker` or
`msb`, which must accept the arguments (each run fails only on the missing sandbox).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import NotFound
from opencode_sandbox.runtime.docker.args import exec_args, run_args, sandbox_labels
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.env_passing import child_environment, env_flags
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import MsbCli, locate_msb
from opencode_sandbox.runtime.types import SandboxSpec

SECRET = "s3cret-Value-0f-the-daemon"
MISSING_VM = "opencode-sandbox-vm-nothere-0123456789abcd"


def test_flags_name_the_variables_and_the_environment_carries_their_values() -> None:
    env = {"OPENCODE_SERVER_PASSWORD": SECRET, "EMPTY": "", "SPACED": "a b=c"}
    assert env_flags("-e", env) == ["-e", "OPENCODE_SERVER_PASSWORD", "-e", "EMPTY", "-e", "SPACED"]
    environment = child_environment(env, inherited={"PATH": "/usr/bin", "EMPTY": "host"})
    assert environment == {"PATH": "/usr/bin", "OPENCODE_SERVER_PASSWORD": SECRET, "EMPTY": "", "SPACED": "a b=c"}


def test_names_the_host_program_reads_keep_their_value_on_the_command_line() -> None:
    env = {"PATH": "/opt/tool/bin:/usr/bin", "HOME": "/home/dev", "DOCKER_HOST": "x", "MSB_HOME": "y", "LANG": "C"}
    assert env_flags("--env", env) == [
        "--env", "PATH=/opt/tool/bin:/usr/bin", "--env", "HOME=/home/dev",
        "--env", "DOCKER_HOST=x", "--env", "MSB_HOME=y", "--env", "LANG",
    ]  # fmt: skip
    environment = child_environment(env, inherited={"PATH": "/usr/bin", "HOME": "/root"})
    assert environment == {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C"}
    assert child_environment({"PATH": "/x"}, inherited={"PATH": "/usr/bin"}) is None
    assert child_environment(None) is None


@pytest.mark.parametrize("name", ["", "A=B", "A\0B"])
def test_a_name_that_cannot_be_inherited_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not an environment variable name"):
        env_flags("-e", {name: "v"})


def test_docker_arguments_carry_no_value() -> None:
    spec = SandboxSpec(name=MISSING_VM, image="img:1", cpus=1, memory_mib=512, env={"TOKEN": SECRET})
    created = run_args(spec, sandbox_labels({}, "nothere-0123456789abcd"), privileged=False, seccomp="/p.json")
    executed = exec_args(MISSING_VM, ["true"], user="dev", workdir="/workspace",
                         env={"OPENCODE_SERVER_PASSWORD": SECRET}, interactive=True, tty=True)
    assert not any(SECRET in arg for arg in [*created, *executed])
    assert created[created.index("-e") + 1] == "TOKEN"
    assert executed[executed.index("-e") + 1] == "OPENCODE_SERVER_PASSWORD"


def _recording_wrapper(folder: Path, real: str) -> tuple[Path, Path]:
    """An executable that records its argv (NUL-separated) and the secret it inherited, then runs `real`."""
    record = folder / "record"
    wrapper = folder / "wrapper"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\0' \"$@\" > '{record}.argv'\n"
        f"printf '%s' \"${{OPENCODE_SERVER_PASSWORD-unset}}\" > '{record}.env'\n"
        f"exec '{real}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return wrapper, record


def _recorded(record: Path) -> tuple[list[str], str]:
    argv = Path(f"{record}.argv").read_bytes().decode().split("\0")[:-1]
    return argv, Path(f"{record}.env").read_text()


@pytest.fixture
def docker_wrapper(tmp_path: Path) -> tuple[Path, Path]:
    real = shutil.which("docker")
    if real is None:
        pytest.skip("docker is not installed")
    return _recording_wrapper(tmp_path, real)


@pytest.mark.docker
def test_docker_exec_on_the_command_line_gets_the_password_through_its_environment(
    docker_wrapper: tuple[Path, Path],
) -> None:
    wrapper, record = docker_wrapper
    runtime = DockerRuntime(cli=DockerCli(executable=str(wrapper)))  # not `docker`: no socket shortcut
    with pytest.raises(NotFound):
        runtime.exec(MISSING_VM, ["true"], env={"OPENCODE_SERVER_PASSWORD": SECRET})
    argv, inherited = _recorded(record)
    assert argv[:1] == ["exec"] and "OPENCODE_SERVER_PASSWORD" in argv
    assert not any(SECRET in arg for arg in argv)
    assert inherited == SECRET


@pytest.mark.docker
def test_docker_attach_gets_the_password_through_its_environment(docker_wrapper: tuple[Path, Path]) -> None:
    wrapper, record = docker_wrapper
    runtime = DockerRuntime(cli=DockerCli(executable=str(wrapper)))
    exit_code = runtime.attach(MISSING_VM, ["opencode", "attach"], env={"OPENCODE_SERVER_PASSWORD": SECRET}, tty=False)
    assert exit_code != 0  # docker ran, and found no such container
    argv, inherited = _recorded(record)
    assert argv[:2] == ["exec", "--interactive"] and not any(SECRET in arg for arg in argv)
    assert inherited == SECRET


@pytest.fixture
def msb_wrapper(tmp_path: Path) -> tuple[Path, Path]:
    return _recording_wrapper(tmp_path, str(locate_msb()))


@pytest.mark.msb
def test_msb_exec_gets_the_password_through_its_environment(msb_wrapper: tuple[Path, Path]) -> None:
    wrapper, record = msb_wrapper
    runtime = MicrosandboxRuntime(cli=MsbCli(wrapper))
    with pytest.raises(NotFound):  # msb took `--env NAME` and then looked for the sandbox
        runtime.exec(MISSING_VM, ["true"], env={"OPENCODE_SERVER_PASSWORD": SECRET}, timeout_s=5)
    argv, inherited = _recorded(record)
    assert argv[:1] == ["exec"] and argv[argv.index("--env") + 1] == "OPENCODE_SERVER_PASSWORD"
    assert not any(SECRET in arg for arg in argv)
    assert inherited == SECRET


@pytest.mark.msb
def test_msb_attach_gets_the_password_through_its_environment(msb_wrapper: tuple[Path, Path]) -> None:
    wrapper, record = msb_wrapper
    runtime = MicrosandboxRuntime(cli=MsbCli(wrapper))
    exit_code = runtime.attach(MISSING_VM, ["opencode", "attach"], env={"OPENCODE_SERVER_PASSWORD": SECRET}, tty=False)
    assert exit_code != 0
    argv, inherited = _recorded(record)
    assert argv[argv.index("--env") + 1] == "OPENCODE_SERVER_PASSWORD" and not any(SECRET in arg for arg in argv)
    assert inherited == SECRET


@pytest.mark.msb
def test_msb_reads_a_bare_env_name_from_its_own_environment() -> None:
    """The behaviour the backend relies on, asked of the bundled msb itself."""
    cli = MsbCli()
    args = ["exec", "--quiet", *env_flags("--env", {"OPENCODE_SERVER_PASSWORD": SECRET}), "--no-tty", "--no-stdin",
            MISSING_VM, "--", "true"]
    without_value = cli.run(args, environment=child_environment({}, inherited={"PATH": "/usr/bin"}) or {})
    assert "OPENCODE_SERVER_PASSWORD" in without_value.error_text and "not set" in without_value.error_text
    with_value = cli.run(args, environment=child_environment({"OPENCODE_SERVER_PASSWORD": SECRET}))
    assert with_value.not_found, with_value.stderr


@pytest.mark.msb
def test_msb_create_takes_the_image_environment_by_name() -> None:
    spec = SandboxSpec(name=MISSING_VM, image="opencode-sandbox/runner-nothere:latest", cpus=1, memory_mib=512,
                       env={"PATH": "/usr/local/bin:/usr/bin:/bin", "TOKEN": SECRET})
    runtime = MicrosandboxRuntime()
    args = runtime._create_args(spec)
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in args and args[args.index("TOKEN") - 1] == "--env"
    assert not any(SECRET in arg for arg in args)
    created = MsbCli().run(args, environment=child_environment(spec.env))
    assert not created.ok
    assert "TOKEN" not in created.error_text  # msb found the value and went on to the missing image
    assert "image" in created.error_text, created.stderr


@pytest.mark.msb
def test_the_env_name_flag_is_what_msb_documents() -> None:
    """`msb exec --help` and `msb create --help` list `-e, --env <ENV>`."""
    msb = str(locate_msb())
    for command in ("exec", "create"):
        shown = subprocess.run([msb, command, "--help"], capture_output=True, text=True, check=False).stdout
        assert "-e, --env <ENV>" in shown
