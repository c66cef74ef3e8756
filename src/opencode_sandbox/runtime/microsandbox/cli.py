"""Finding and running the `msb` binary that the microsandbox wheel bundles."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opencode_sandbox.bounded_output import run_captured
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import RuntimeUnavailable

_INSTALL_HINT = "reinstall opencode-sandbox (its `microsandbox` dependency ships msb), or use `--runtime docker`"


def locate_msb() -> Path:
    """The msb binary: `MSB_PATH` if set, else the wheel's bundled copy, found without importing
    the SDK (its import costs a tenth of a second), else whatever the SDK itself resolves."""
    override = os.environ.get("MSB_PATH")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("microsandbox")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / "_bundled" / "bin" / "msb"
            if candidate.is_file():
                return candidate
    try:
        from microsandbox._microsandbox import resolved_cli_msb_path
    except ImportError as error:
        raise RuntimeUnavailable("the microsandbox package is not installed", hint=_INSTALL_HINT) from error
    try:
        return Path(resolved_cli_msb_path())
    except Exception as error:
        raise RuntimeUnavailable(f"msb not found: {error}", hint=_INSTALL_HINT) from error


DROPPED_CAPABILITIES = ("setfcap", "sys_admin", "mknod", "fsetid", "linux_immutable")
"""What msb, run by root, must not hold: its file server writes every extended attribute the VM
sets through to the host file but its own, so with these root in the VM could give a host file
capabilities (`security.capability`), `trusted.*` or `security.*` attributes, keep set-ID bits
over a write, or make it immutable. msb needs none of them to run a VM."""
_CAP_SETPCAP = 8
_EXEC_FAILED = 127
_prefix: list[str] | None = None


def without_host_privileges() -> list[str]:
    """The prefix that starts msb with `DROPPED_CAPABILITIES` out of its bounding set, so neither
    it nor the VM processes it starts can hold them: `setpriv` (util-linux) when this process is
    root and may drop them; empty otherwise (a user other than root holds none of them)."""
    global _prefix
    if _prefix is None:
        import shutil

        setpriv = shutil.which("setpriv")
        _prefix = ([setpriv, "--bounding-set", ",".join(f"-{name}" for name in DROPPED_CAPABILITIES), "--"]
                   if os.geteuid() == 0 and setpriv and _may_drop_capabilities() else [])
    return _prefix


def _may_drop_capabilities() -> bool:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    effective = next((line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), "0")
    return bool(int(effective, 16) >> _CAP_SETPCAP & 1)


class MsbResult(Record):
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def error_text(self) -> str:
        """The first `error:` line msb printed, without the prefix."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        for line in lines:
            if line.startswith("error:"):
                return line[len("error:") :].strip()
        return lines[-1] if lines else f"msb exited with status {self.returncode}"

    @property
    def failure_text(self) -> str:
        """The `error:` line with the causes msb lists under it (`→ ...`), on one line."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        causes = [
            line.lstrip("→").strip().removeprefix("other:").strip()
            for line in lines
            if line.startswith("→") and not line.lstrip("→").strip().startswith("run `")
        ]
        return ": ".join([self.error_text, *causes])

    @property
    def not_found(self) -> bool:
        return "not found" in self.error_text

    @property
    def agent_failed(self) -> bool:
        """msb could not reach the VM's agent, so the command never ran (its exit status is msb's)."""
        return not self.ok and not self.stdout and self.stderr.lstrip().startswith("error: agent ")


class MsbCli:
    """Runs msb subcommands and decodes their JSON output."""

    def __init__(self, binary: Path | None = None) -> None:
        self._binary = binary

    @property
    def binary(self) -> Path:
        if self._binary is None:
            self._binary = locate_msb()
        return self._binary

    def command(self, *args: str) -> list[str]:
        return [*without_host_privileges(), str(self.binary), *args]

    def check_runnable(self) -> None:
        """msb is there and executable, found without running it: a start's first msb call tells
        whether it works (`failure`)."""
        binary = self.binary
        if not binary.is_file():
            raise RuntimeUnavailable(f"msb not found at {binary}", hint=_INSTALL_HINT)
        if not os.access(binary, os.X_OK):
            raise RuntimeUnavailable(f"msb at {binary} is not executable", hint=_INSTALL_HINT)

    def run(
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = 120.0,
        environment: Mapping[str, str] | None = None,
        output_limit: int | None = None,
    ) -> MsbResult:
        """`msb ARGS`; `environment` replaces this process's own for it (see `env_passing`). With
        `output_limit`, `OutputOverLimit` (msb killed) once one of its streams passes that many bytes."""
        try:
            completed = run_captured(self.command(*args), stdin=stdin, timeout_s=timeout_s, env=environment,
                                     limit=output_limit)
        except FileNotFoundError as error:
            raise RuntimeUnavailable(f"msb not found at {self.binary}", hint=_INSTALL_HINT) from error
        except OSError as error:  # not executable, or not a program for this host
            raise RuntimeUnavailable(f"msb at {self.binary} cannot run: {error.strerror or error}",
                                     hint=_INSTALL_HINT) from error
        except subprocess.TimeoutExpired as error:
            raise RuntimeUnavailable(
                f"msb {' '.join(args[:2])} did not answer within {timeout_s:.0f} s",
                hint="check the host's load and `msb doctor`, then try again",
            ) from error
        stderr = completed.stderr.decode("utf-8", errors="replace")
        if completed.returncode == _EXEC_FAILED and without_host_privileges():
            # Run through setpriv, msb that cannot start shows as setpriv's failure to start it.
            said = (stderr.strip().splitlines() or ["it could not be started"])[-1]
            raise RuntimeUnavailable(f"msb at {self.binary} cannot run: {said}", hint=_INSTALL_HINT)
        return MsbResult(completed.returncode, completed.stdout.decode("utf-8", errors="replace"), stderr)

    def json(self, args: Sequence[str]) -> Any | None:
        """Decoded `--format json` output, or None when msb reports the object as not found."""
        result = self.run([*args, "--format", "json"])
        if not result.ok:
            if result.not_found:
                return None
            raise self.failure(args, result)
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError as error:
            raise RuntimeUnavailable(
                f"msb {' '.join(args[:2])} printed output that is not JSON",
                hint="check that the installed microsandbox version is supported",
            ) from error

    def failure(self, args: Sequence[str], result: MsbResult) -> RuntimeUnavailable:
        """The error for an msb call that failed: msb itself when it does not even tell its
        version (reinstall), else this call (`msb doctor`)."""
        try:
            self.version()
        except RuntimeUnavailable as broken:
            return broken
        return RuntimeUnavailable(f"msb {' '.join(args[:2])} failed: {result.error_text}",
                                  hint="run `msb doctor` to check the runtime")

    def version(self) -> str:
        result = self.run(["--version"], timeout_s=15.0)
        if not result.ok:
            raise RuntimeUnavailable(f"msb does not answer: {result.error_text}", hint=_INSTALL_HINT)
        return result.stdout.strip().removeprefix("msb").strip()


def msb_version(binary: Path | None = None) -> str:
    """The version of the msb binary that would be used, e.g. `0.7.11`."""
    return MsbCli(binary).version()
