"""Running the `docker` command line: one place that turns its failures into our errors."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.errors import RuntimeUnavailable, SandboxError
from opencode_sandbox.runtime.docker_api import ApiUnavailable, DockerApi, forget_read_ahead

if TYPE_CHECKING:
    import subprocess
    from typing import Any, Literal

ENGINE_HINT = "Start the Docker engine, then check with `opencode-sandbox doctor`."
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
    """The `docker` executable, run as a subprocess; honours DOCKER_HOST and contexts."""

    def __init__(self, executable: str = "docker") -> None:
        self.executable = executable
        self._api: DockerApi | Literal[False] | None = None

    def command(self, args: Sequence[str]) -> list[str]:
        """The command line of a docker command about to run, which may change the engine's answers."""
        forget_read_ahead()
        return [self.executable, *args]

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
    ) -> subprocess.CompletedProcess[bytes]:
        import subprocess  # loaded only when a command runs: the engine's socket answers most questions

        try:
            return subprocess.run(
                self.command(args),
                input=stdin,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
                check=False,
                env=environment,
            )
        except FileNotFoundError:
            raise RuntimeUnavailable(
                f"the `{self.executable}` command is not installed",
                hint="Install Docker Engine, or use the microsandbox runtime.",
            ) from None
        except subprocess.TimeoutExpired:
            if args and args[0] == "exec":
                raise
            raise RuntimeUnavailable(
                f"`docker {args[0]}` did not answer within {timeout_s:.0f} s", hint=ENGINE_HINT
            ) from None

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
            self._api = DockerApi.for_environment() or False
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
