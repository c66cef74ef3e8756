"""Where things are inside a VM, for the operations and for what attaches to it."""

from __future__ import annotations

from opencode_sandbox.core.ports import DAEMON_PORT

GUEST_URL = f"http://127.0.0.1:{DAEMON_PORT}"
"""The agent's server as the VM itself reaches it."""
HOME = "/home/dev"
SERVER_LOG = f"{HOME}/.local/state/opencode-sandbox/daemon.log"
EMPTY_LOG = "(the log is empty)"
"""What reading the server's log gives when there is nothing in it."""
