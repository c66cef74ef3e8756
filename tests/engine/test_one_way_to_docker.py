"""Every Docker call of the package goes through the image engine or the docker runtime backend.

The package is read as source: a `subprocess` call whose command starts with `docker`, a
Docker socket path, or an import of the command wrapper or the socket client anywhere else
fails the test, naming the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opencode_sandbox

PACKAGE = Path(opencode_sandbox.__file__).parent
ALLOWED = ("engine/", "runtime/docker/backend.py", "runtime/docker/execution.py", "runtime/docker/netfilter.py",
           "runtime/docker/proxy.py", "runtime/docker/policy_pieces.py", "runtime/docker/identity.py",
           "runtime/docker/owner.py", "runtime/docker/network_holder.py", "runtime/docker/gated_exec.py")
TRANSPORT = ("opencode_sandbox.engine.command", "opencode_sandbox.engine.socket_client")
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
SOCKET_MARKERS = ("docker.sock", "/var/run/docker", "docker_engine")


def _starts_with_docker(argument: ast.expr) -> bool:
    if isinstance(argument, ast.List | ast.Tuple) and argument.elts:
        first = argument.elts[0]
        return isinstance(first, ast.Constant) and isinstance(first.value, str) \
            and first.value.rsplit("/", 1)[-1] == "docker"
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value.split(" ", 1)[0].rsplit("/", 1)[-1] == "docker"
    return False


def _is_subprocess_call(call: ast.Call, imported: set[str]) -> bool:
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr in SUBPROCESS_CALLS and isinstance(function.value, ast.Name) \
            and function.value.id == "subprocess"
    return isinstance(function, ast.Name) and function.id in imported


def docker_calls(source: str) -> list[str]:
    """Where `source` reaches Docker on its own: `line N: what`."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "subprocess" for alias in node.names if alias.name in SUBPROCESS_CALLS}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_subprocess_call(node, imported):
            arguments = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "args")]
            if any(_starts_with_docker(argument) for argument in arguments):
                found.append(f"line {node.lineno}: a `docker` command run directly")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and any(marker in node.value for marker in SOCKET_MARKERS):
            found.append(f"line {node.lineno}: a Docker socket path")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if any(module in TRANSPORT for module in modules):
                found.append(f"line {node.lineno}: imports the engine's transport")
        elif isinstance(node, ast.Import) and any(alias.name in TRANSPORT for alias in node.names):
            found.append(f"line {node.lineno}: imports the engine's transport")
    return found


def outside_the_engine(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ALLOWED):
            continue
        calls = docker_calls(path.read_text(encoding="utf-8"))
        if calls:
            found[relative] = calls
    return found


def test_no_module_outside_the_engine_and_the_docker_backend_reaches_docker() -> None:
    assert outside_the_engine(PACKAGE) == {}


def test_the_allowed_modules_exist() -> None:
    for allowed in ALLOWED:
        assert (PACKAGE / allowed).exists(), allowed


@pytest.mark.parametrize("source", [
    'import subprocess\nsubprocess.run(["docker", "image", "inspect", ref])\n',
    'import subprocess\nsubprocess.Popen(("/usr/bin/docker", "save", ref), stdout=subprocess.PIPE)\n',
    'from subprocess import check_output\ncheck_output(["docker", "ps"])\n',
    'import subprocess\nsubprocess.call("docker version", shell=True)\n',
    'SOCKET = "/var/run/docker.sock"\n',
    'from opencode_sandbox.engine.command import DockerCli\n',
    'from opencode_sandbox.engine import socket_client\n',
    'import opencode_sandbox.engine.socket_client\n',
])
def test_the_check_finds_each_way_around_the_engine(source: str) -> None:
    assert docker_calls(source)


@pytest.mark.parametrize("source", [
    'import subprocess\nsubprocess.run(["git", "--version"])\n',
    'from opencode_sandbox.engine.docker import DockerImageEngine\n',
    'HINT = "run `docker info`"\n',
])
def test_the_check_leaves_other_commands_and_the_adapter_alone(source: str) -> None:
    assert docker_calls(source) == []
