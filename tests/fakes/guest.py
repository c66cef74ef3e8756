"""The guest operations of `FakeRuntime`'s VMs, without a shell: each VM's `opencode serve`, its
home's probe, the archives unpacked into it. Held to the same contract as the shell operations
(tests/guest/)."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field

from opencode_sandbox.core.agent_activity import AgentReport
from opencode_sandbox.core.dev_home import FOLDERS, BlockedFolder, HomeProbe
from opencode_sandbox.errors import NotFound, SandboxError
from opencode_sandbox.guest.places import EMPTY_LOG, HOME
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import ExecResult, MountKind, SandboxStatus
from tests.fakes.runtime import USERS, FakeNode, FakeRuntime, FakeSandbox

OPENCODE = "/usr/local/bin/opencode"


@dataclass
class FakeServer:
    """`opencode serve` in one fake VM."""

    running: bool | None = False
    """A process exists (it ends with the VM's boot it started in); None: the VM cannot tell."""
    answers: bool = False
    """Its health check answers; what `daemon.health.is_serving` would find."""
    comes_up: bool = True
    """A start makes it answer."""
    exits_at_start: bool = False
    """A start leaves no process behind."""
    boot: int = -1
    password: str | None = None
    log: str = ""
    events: list[str] = field(default_factory=list)
    """`start`, `stop` and `running?` (a look for its process), in order."""


@dataclass
class FakeGuests:
    """A `GuestFactory` for one `FakeRuntime`, with each VM's state for a test to read or script."""

    servers: dict[str, FakeServer] = field(default_factory=dict)
    probes: dict[str, HomeProbe | None] = field(default_factory=dict)
    """A VM's scripted probe; without one it is read from the VM's home."""
    unpacked: dict[str, list[bytes]] = field(default_factory=dict)
    start_failure: ExecResult | None = None
    """What the next server starts return in place of starting it."""
    unpack_failure: ExecResult | None = None
    inner_docker: ExecResult = field(default_factory=lambda: ExecResult(0, "", ""))
    report: str = ""
    agent_reports: dict[str, AgentReport] = field(default_factory=dict)
    """A VM's terminal agent as its session and hooks would report it; without one, no session runs."""

    def __call__(self, runtime: Runtime, vm: str) -> FakeGuest:
        assert isinstance(runtime, FakeRuntime), "the fake operations run on the fake runtime"
        return FakeGuest(self, runtime, vm)

    def server(self, vm: str) -> FakeServer:
        return self.servers.setdefault(vm, FakeServer())

    def script_server(self, runtime: FakeRuntime, vm: str, running: bool | None, answers: bool = False) -> FakeServer:
        """A server in the VM's current boot, as if started in it, with what it answers."""
        server = self.server(vm)
        server.boot = runtime.sandboxes[vm].boots
        server.running, server.answers = running, answers
        return server


class FakeGuest:
    def __init__(self, guests: FakeGuests, runtime: FakeRuntime, vm: str) -> None:
        self.guests = guests
        self.runtime = runtime
        self.vm = vm

    def _running(self, operation: str) -> FakeSandbox:
        self.runtime.calls.append((operation, self.vm))
        sandbox = self.runtime.sandboxes.get(self.vm)
        if sandbox is None:
            raise NotFound(f"sandbox {self.vm} does not exist", hint="Start it.")
        if sandbox.status is not SandboxStatus.RUNNING:
            raise SandboxError(f"sandbox {self.vm} is not running", hint="Start it.")
        return sandbox

    def _server(self, sandbox: FakeSandbox) -> FakeServer:
        server = self.guests.server(self.vm)
        if server.boot != sandbox.boots:
            server.running = server.answers = False
        return server

    def start_server(self, password: str) -> ExecResult:
        sandbox = self._running("start_server")
        if self.guests.start_failure is not None:
            return self.guests.start_failure
        server = self._server(sandbox)
        server.events.append("start")
        server.boot, server.password = sandbox.boots, password
        server.running = not server.exits_at_start
        server.answers = server.running and server.comes_up
        return ExecResult(0, "", "")

    def server_running(self) -> bool | None:
        server = self._server(self._running("server_running"))
        server.events.append("running?")
        return server.running

    def stop_server(self) -> None:
        server = self._server(self._running("stop_server"))
        server.events.append("stop")
        server.running = server.answers = False

    def server_log(self, lines: int = 30) -> str:
        server = self._server(self._running("server_log"))
        return "\n".join(server.log.strip().splitlines()[-lines:]) or EMPTY_LOG

    def server_report(self) -> str:
        self._running("server_report")
        return self.guests.report

    def probe_home(self) -> HomeProbe | None:
        try:
            sandbox = self._running("probe_home")
        except SandboxError:
            return None
        if self.vm in self.guests.probes:
            return self.guests.probes[self.vm]
        dev = (USERS["dev"], USERS["dev"])
        home = self._home(sandbox)
        for folder in FOLDERS:
            node = home.get(folder.removeprefix(HOME).strip("/")) if home is not None else None
            if node is None or node.kind != "dir":
                continue
            owner = USERS.get(node.owner, USERS["dev"])
            if owner != USERS["dev"] or (node.mode & 0o300) != 0o300:
                return HomeProbe(dev, OPENCODE, BlockedFolder(folder, (owner, owner), f"{node.mode & 0o7777:o}"))
        return HomeProbe(dev, OPENCODE, None)

    def unpack_home(self, archive: bytes) -> ExecResult:
        sandbox = self._running("unpack_home")
        self.guests.unpacked.setdefault(self.vm, []).append(archive)
        if self.guests.unpack_failure is not None:
            return self.guests.unpack_failure
        home = self._home(sandbox)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("./").strip("/")
                if home is None or not name:
                    continue
                if member.isdir():
                    home.setdefault(name, FakeNode("dir", "dev", member.mode))
                elif member.isfile():
                    extracted = tar.extractfile(member)
                    data = extracted.read().decode(errors="replace") if extracted else ""
                    home[name] = FakeNode("file", "dev", member.mode, data)
        return ExecResult(0, "", "")

    def start_inner_docker(self) -> ExecResult:
        self._running("start_inner_docker")
        return self.guests.inner_docker

    def agent_report(self) -> AgentReport:
        self._running("agent_report")
        return self.guests.agent_reports.get(self.vm, AgentReport(False))

    def _home(self, sandbox: FakeSandbox) -> dict[str, FakeNode] | None:
        for mount in sandbox.spec.mounts if sandbox.spec else ():
            if mount.kind is MountKind.VOLUME and mount.target == HOME:
                return self.runtime.volumes[mount.source].files
        return None
