"""The runtime interface's own value types; no SDK type ever leaves a backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum

from opencode_sandbox.core.egress import EgressPolicy
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_status import SandboxStatus
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.runtime.kind import RuntimeKind

__all__ = ["RuntimeKind", "SandboxStatus"]


class MountKind(StrEnum):
    VOLUME = "volume"
    BIND = "bind"


class Mount(Record):
    kind: MountKind
    source: str
    """A volume name for VOLUME, an absolute host path for BIND: a folder, or a file where the
    runtime can mount one."""
    target: str
    readonly: bool = False


class SandboxSpec(Record):
    name: str
    image: str
    """The runner image reference (for microsandbox: as loaded into the runtime)."""
    cpus: int
    memory_mib: int
    env: Mapping[str, str] = {}
    labels: Mapping[str, str] = {}
    mounts: tuple[Mount, ...] = ()
    workdir: str = "/workspace"
    published_ports: tuple[int, ...] = ()
    """Guest TCP ports published on the host's 127.0.0.1 only, on a free host port unless
    `host_ports` names one."""
    host_ports: Mapping[int, int] = {}
    """The 127.0.0.1 port of a published guest port, where the user chose it."""
    dev_identity: tuple[int, int] | None = None
    """The host uid and gid that `dev` acts as: what it creates in a bind mount belongs to
    them on the host, and it can write what they own. None leaves the image's `dev` as it is."""
    privileged: bool = False
    """The user's configuration allows a privileged VM (Docker-in-Docker): host root for the agent
    on the docker runtime, so an image's label alone never makes one."""
    pids_limit: int | None = None
    """The most processes and threads at once, where the runtime shares the host's kernel."""
    network: EgressPolicy | None = None
    """Where the sandbox may connect; None leaves the runtime's own default."""
    ca_certificates: tuple[bytes, ...] = ()
    """PEM CA certificates trusted for outbound connections besides the public ones (the host's
    added ones and `extra-ca-certificates`), when the runtime intercepts the VM's HTTPS: the
    docker runtime's egress proxy verifies servers with them."""
    ca_certificate_files: tuple[str, ...] = ()
    """The files those certificates come from, for a runtime that reads them itself (msb verifies
    the servers of intercepted connections with them)."""


class SandboxInfo(Record):
    name: str
    status: SandboxStatus
    image: str
    created_at: datetime | None
    last_activity_at: datetime | None
    labels: Mapping[str, str] = {}
    repair: str = ""
    """What a running sandbox lacks that starting it again restores (the docker runtime's
    egress proxy died, say); empty when nothing."""
    owner_unlabelled: bool = False
    """Made by an older version without the owner label and recorded as this host user's (docker
    runtime): recreating it once, on its home volume, labels it."""
    ports: Mapping[int, int] | None = None
    """A running sandbox's published ports (guest port -> host port on 127.0.0.1), read with the rest
    where the runtime has them at hand; None where it did not read them (ask `port_map`)."""


class VolumeInfo(Record):
    name: str
    kind: str
    size_bytes: int | None
    created_at: datetime | None
    labels: Mapping[str, str] = {}


class ImageInfo(Record):
    reference: str
    digest: str
    """The image's config digest (`sha256:<64 hex>`): equal to Docker's image ID."""
    size_bytes: int | None
    created_at: datetime | None
    labels: Mapping[str, str] = {}


class Refusal(Record):
    """Connections the network policy refused to one destination, as the runtime recorded them."""

    destination: str
    """An address, or a host name where the runtime judged names."""
    protocol: str
    port: int | None
    attempts: int
    last_seen: datetime | None
    reason: str = ""
    """Why, as the runtime recorded it (the proxy does: a secret's placeholder, for one); empty
    when only the destination was recorded."""


class ExecResult(Record):
    exit_code: int
    stdout: str
    stderr: str


EXEC_OUTPUT_LIMIT = 16 << 20
"""The most of each stream of an exec the host holds: what the VM writes is the VM's to make large,
and every answer this tool asks for is far smaller (the VM's refs, at about 100 bytes each, are
the largest)."""


def too_much_output(name: str, argv: Sequence[str], limit: int) -> SandboxError:
    """The error for an exec in `name` whose output passed `limit` bytes, which was not read further."""
    return SandboxError(f"`{' '.join(argv)[:200]}` in {name} wrote more than {limit:,} bytes, which are not read",
                        hint="something in the VM answers with far more than asked; look at what the command "
                             "reads there, or recreate the VM with `opencode-sandbox run --rebuild`")


class HostCheck(Record):
    """One of a runtime's own checks of this host, for `doctor`."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
