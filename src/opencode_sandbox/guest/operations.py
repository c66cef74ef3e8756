"""The operations this tool runs inside a VM, by name. Services ask for them; a backend of the
runtime never needs to know what they are, and a fake implements them without a shell."""

from __future__ import annotations

from typing import Protocol

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from opencode_sandbox.core.agent_activity import AgentReport
    from opencode_sandbox.core.dev_home import HomeProbe
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.types import ExecResult

class Guest(Protocol):
    """One VM. Each operation raises `SandboxError` when the VM cannot be asked at all (stopped,
    gone, the runtime not answering); a failure inside the VM is in the result it returns."""

    vm: str

    def start_server(self, password: str) -> ExecResult:
        """Start `opencode serve` detached, as dev, its output appended to `places.SERVER_LOG`; a non-zero
        exit when it could not be started (the output says why)."""

    def server_running(self) -> bool | None:
        """Whether an `opencode serve` process exists, answering or not yet; None when the VM
        cannot tell."""

    def stop_server(self) -> None:
        """End every `opencode serve` process; nothing when none runs."""

    def server_log(self, lines: int = 30) -> str:
        """The last `lines` of `places.SERVER_LOG`; `places.EMPTY_LOG` when there is nothing in it."""

    def server_report(self) -> str:
        """What the server is doing now, for a start that failed: its processes, then each
        table of /proc/net after a line `--- <table>`, then `--- inside` and the HTTP status
        its health check gives inside the VM (empty when nothing answered)."""

    def probe_home(self) -> HomeProbe | None:
        """What dev finds in its home (`core/dev_home.py`); None when the VM could not be asked."""

    def unpack_home(self, archive: bytes) -> ExecResult:
        """Unpack a tar archive into dev's home as dev, keeping the folders that exist as they are."""

    def start_inner_docker(self) -> ExecResult:
        """Start the Docker engine of a Docker-in-Docker image, as root."""

    def agent_report(self) -> AgentReport:
        """Whether a terminal agent's session runs and what its hooks last recorded, as dev."""


class GuestFactory(Protocol):
    def __call__(self, runtime: Runtime, vm: str) -> Guest: ...
