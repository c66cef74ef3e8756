"""The guest ports published on the host's loopback: free before a start, listed afterwards."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable, Mapping

from opencode_sandbox.app import App
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.core.ports import DAEMON_PORT, PublishedPort
from opencode_sandbox.errors import UsageError


def refuse_busy_host_ports(ports: Iterable[PublishedPort], where: str) -> None:
    """A chosen host port something else already listens on, before the VM is made or started."""
    for port in ports:
        if port.host is not None and _in_use(port.host):
            raise UsageError(
                f"host port {port.host} (port '{port.written}', {where}) is already in use on 127.0.0.1",
                hint=f"stop what listens there (`ss -ltnp 'sport = :{port.host}'` shows it), choose another "
                     f"host port, or write only the guest port ({port.guest}) to have a free one picked",
            )


def _in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE  # a privileged port is the runtime's to judge
    return False


def user_ports(port_map: Mapping[int, int]) -> dict[int, int]:
    """The published ports other than opencode serve's own."""
    return {guest: host for guest, host in sorted(port_map.items()) if guest != DAEMON_PORT}


def project_ports(app: App) -> tuple[str, dict[int, int] | None]:
    """The project VM's name and its published ports (opencode serve's included); None while stopped."""
    name = vm_name(app.project.slug)
    info = app.runtime.get_sandbox(name)
    if info is None:
        raise UsageError(f"this project has no VM ({name}), so no port is published",
                         hint="start it with `opencode-sandbox` or `opencode-sandbox shell`, then look again")
    if not info.status.is_active:
        return name, None
    return name, app.runtime.port_map(name)




