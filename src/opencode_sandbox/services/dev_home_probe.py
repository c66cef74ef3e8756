"""Asking a running VM whether `dev` can use its home (see `core/dev_home.py`)."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.dev_home import PROBE_SCRIPT, Diagnosis, HomeProbe, home_problem, read_probe
from opencode_sandbox.errors import SandboxError

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime


def probe_dev_home(runtime: Runtime, vm: str) -> HomeProbe | None:
    """What dev finds in its home; None when the VM could not be asked."""
    try:
        result = runtime.exec(vm, ["sh", "-c", PROBE_SCRIPT], workdir="/", timeout_s=30)
    except SandboxError:
        return None
    return read_probe(result.stdout)


def home_failure(runtime: Runtime, vm: str, volume: str | None) -> Diagnosis | None:
    """Why dev cannot use its home, when it cannot: asked after something in the home failed."""
    return home_problem(probe_dev_home(runtime, vm), volume)
