"""The one wrapper of the `docker` command: which failures mean the engine cannot be used."""

from __future__ import annotations

import pytest

from opencode_sandbox.engine.command import DockerCli, engine_failure
from opencode_sandbox.errors import RuntimeUnavailable


@pytest.mark.parametrize(
    "stderr",
    [
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
        "error during connect: Get http://%2F%2F.%2Fpipe%2Fdocker_engine/v1.24/version",
    ],
)
def test_engine_down_messages_are_recognised(stderr: str) -> None:
    failure = engine_failure(stderr)
    assert isinstance(failure, RuntimeUnavailable)
    assert "doctor" in (failure.hint or "")


def test_socket_permission_problem_has_its_own_hint() -> None:
    failure = engine_failure(
        "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock"
    )
    assert failure is not None and "`docker` group" in (failure.hint or "")


def test_other_errors_are_not_engine_failures() -> None:
    assert engine_failure("Error: No such image: foo") is None


def test_missing_docker_command_is_runtime_unavailable() -> None:
    with pytest.raises(RuntimeUnavailable, match="not installed") as raised:
        DockerCli(executable="docker-command-that-does-not-exist").run(["version"])
    assert raised.value.hint
