"""The package's one wrapper of the `docker` command, beside its one socket client.

`DockerCli` runs the command (honouring `DOCKER_HOST` and the user's contexts) and turns its
failures into this tool's errors; where the local engine allows, it answers inspections over
the engine's socket instead (`socket_client`). The image engine adapter and the docker runtime
backend both drive the engine through it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.bounded_output import run_captured
from opencode_sandbox.engine.socket_client import ApiUnavailable, DockerApi
from opencode_sandbox.errors import RuntimeUnavailable, SandboxError

if TYPE_CHECKING:
    import subprocess
    from typing import Any, Literal

ENGINE_HINT = "Start the Docker engine, then check with `opencode-sandbox doctor`."
INSTALL_HINT = "Install Docker Engine (it builds the runner images), or use the microsandbox runtime."
MANAGEMENT_TIMEOUT_S = 120.0

_ENGINE_DOWN_MARKERS = (
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "error during connect",
    "docker daemon is not running",
)
_PERMISSION_MARKER = "permission denied while trying to connect"
_MISSING_MARKERS = ("no such container", "no such object", "no such volume", "no such image")


class DockerFailed(SandboxError):
    """A docker command that ran and failed for a reason other than the engine being away."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        self.args_run = tuple(args)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(first_line(self.stderr) or f"docker {args[0]} failed ({returncode})")

    @property
    def is_missing(self) -> bool:
        lowered = self.stderr.lower()
        return any(marker in lowered for marker in _MISSING_MARKERS)


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def engine_failure(stderr: str) -> RuntimeUnavailable | None:
    """The error for `docker` output that says the engine cannot be used, else None."""
    lowered = stderr.lower()
    if _PERMISSION_MARKER in lowered:
        return RuntimeUnavailable(
            "permission denied on the Docker engine socket",
            hint="Add your user to the `docker` group (then log in again) or set DOCKER_HOST.",
        )
    if any(marker in lowered for marker in _ENGINE_DOWN_MARKERS):
        return RuntimeUnavailable("the Docker engine is not answering", hint=ENGINE_HINT)
    return None


def raise_if_engine_unavailable(stderr: str) -> None:
    failure = engine_failure(stderr)
    if failure is not None:
        raise failure


class DockerCli:
    """The `docker` executable, run as a subprocess; honours DOCKER_HOST and contexts.

    `env` replaces this process's environment for every command (and decides whether the
    engine's socket applies); None inherits it."""

    def __init__(self, executable: str = "docker", env: Mapping[str, str] | None = None) -> None:
        self.executable = executable
        self.env = dict(env) if env is not None else None
        self._api: DockerApi | Literal[False] | None = None

    def command(self, args: Sequence[str]) -> list[str]:
        return [self.executable, *args]

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """The environment of a command: this wrapper's (or the process's) with `extra` on top;
        None (inherit) when there is nothing to change."""
        if self.env is None and not extra:
            return None
        environment = dict(self.env if self.env is not None else os.environ)
        environment.update(extra or {})
        return environment

    def run(
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = MANAGEMENT_TIMEOUT_S,
        environment: Mapping[str, str] | None = None,
    ) -> str:
        """Run `docker ARGS` and return its stdout; raise `DockerFailed` on a non-zero exit.

        `environment` replaces this process's own for the command (see `env_passing`)."""
        completed = self.run_raw(args, stdin=stdin, timeout_s=timeout_s, environment=environment)
        stdout = completed.stdout.decode(errors="replace")
        if completed.returncode != 0:
            stderr = completed.stderr.decode(errors="replace")
            raise_if_engine_unavailable(stderr)
            raise DockerFailed(args, completed.returncode, stderr)
        return stdout

    def run_raw(
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = MANAGEMENT_TIMEOUT_S,
        environment: Mapping[str, str] | None = None,
        output_limit: int | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """`docker ARGS`, both streams captured; with `output_limit`, `OutputOverLimit` (the command
        killed) once one passes that many bytes."""
        import subprocess  # loaded only when a command runs: the engine's socket answers most questions

        env = environment if environment is not None else self.environment()
        try:
            return run_captured(self.command(args), stdin=stdin, timeout_s=timeout_s, env=env, limit=output_limit)
        except FileNotFoundError:
            raise self._not_installed() from None
        except subprocess.TimeoutExpired:
            if args and args[0] == "exec":
                raise
            raise RuntimeUnavailable(
                f"`docker {args[0]}` did not answer within {timeout_s:.0f} s", hint=ENGINE_HINT
            ) from None

    def stream(
        self,
        args: Sequence[str],
        on_line: Callable[[str], None],
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> int:
        """Run with stdout and stderr merged, handing over each line; return the exit code."""
        import subprocess

        try:
            process = subprocess.Popen(
                self.command(args),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(extra_env),
                text=True,
                errors="replace",
                bufsize=1,
            )
        except FileNotFoundError:
            raise self._not_installed() from None
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                on_line(line.rstrip("\n"))
        return process.wait()

    def open_output(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start `docker ARGS` with its stdout and stderr as pipes, for output read as a stream."""
        import subprocess

        try:
            return subprocess.Popen(
                self.command(args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.environment(),
            )
        except FileNotFoundError:
            raise self._not_installed() from None

    def _not_installed(self) -> RuntimeUnavailable:
        return RuntimeUnavailable(f"the `{self.executable}` command is not installed", hint=INSTALL_HINT)

    def inspect(self, kind: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """`docker inspect` of existing objects; [] when the (single) name is missing."""
        if not names:
            return []
        fast = self._inspect_through_api(kind, names)
        if fast is not None:
            return fast
        command = ["volume", "inspect"] if kind == "volume" else ["inspect", "--type", kind]
        args = [*command, *names]
        completed = self.run_raw(args)
        stdout = completed.stdout.decode(errors="replace").strip()
        if completed.returncode != 0:
            stderr = completed.stderr.decode(errors="replace")
            raise_if_engine_unavailable(stderr)
            failure = DockerFailed(args, completed.returncode, stderr)
            if not failure.is_missing:
                raise failure
        parsed = json.loads(stdout) if stdout.startswith("[") else []
        return [entry for entry in parsed if isinstance(entry, dict)]

    def engine_answers_ping(self) -> bool:
        """True when the local engine's socket answers; False means: ask the command."""
        api = self.socket_api()
        if api is None:
            return False
        try:
            status, _ = api.get("/_ping")
        except ApiUnavailable:
            return False
        return status == 200

    def socket_api(self) -> DockerApi | None:
        """The engine's socket while it is plain local and has not failed; None: use the command."""
        if self.executable != "docker" or self._api is False:
            return None
        if self._api is None:
            self._api = DockerApi.for_environment(self.env) or False
        return self._api or None

    def give_up_socket(self) -> None:
        """The socket failed: from now on every call goes through the command."""
        self._api = False

    def _inspect_through_api(self, kind: str, names: Sequence[str]) -> list[dict[str, Any]] | None:
        """The same documents over the engine's socket; None to use the command instead."""
        api = self.socket_api()
        if api is None:
            return None
        try:
            documents = [api.inspect(kind, name) for name in names]
        except ApiUnavailable:
            self.give_up_socket()
            return None
        return [document for document in documents if document is not None]

    def lines(self, args: Sequence[str]) -> list[str]:
        return [line.strip() for line in self.run(args).splitlines() if line.strip()]
