"""Starting, restarting and checking `opencode serve` inside the VM."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.state.files import ensure_private_dir, write_atomic

if TYPE_CHECKING:
    from opencode_sandbox.runtime.base import Runtime

GUEST_URL = f"http://127.0.0.1:{DAEMON_PORT}"
DAEMON_LOG = "/home/dev/.local/state/opencode-sandbox/daemon.log"
# Every address family: offline, msb gives a microVM IPv6 alone and forwards its published ports
# over IPv6, so a server on 0.0.0.0 alone never answers the host. `::` takes IPv4 too.
_SERVE = f"opencode serve --hostname :: --port {DAEMON_PORT}"
_START_SCRIPT = (
    "command -v opencode >/dev/null || { echo 'opencode: not found on the PATH' >&2; exit 127; } && "
    f'mkdir -p "$(dirname {DAEMON_LOG})" && '
    f"setsid -f sh -c 'exec {_SERVE} >>{DAEMON_LOG} 2>&1' </dev/null >/dev/null 2>&1"
)
_PATTERN = "opencode serve --hostname"
_STOP_SCRIPT = f"pkill -KILL -f '{_PATTERN}' ; true"


def password_path(project_state_dir: Path) -> Path:
    return project_state_dir / "daemon-password"


def read_password(project_state_dir: Path) -> str | None:
    try:
        value = password_path(project_state_dir).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return value or None


def new_password(project_state_dir: Path) -> str:
    """A fresh per-VM password, kept with mode 0600 in the project's state folder."""
    ensure_private_dir(project_state_dir)
    import secrets

    value = secrets.token_urlsafe(24)
    write_atomic(password_path(project_state_dir), value + "\n")
    return value


def start_daemon(runtime: Runtime, vm: str, password: str, home_volume: str | None = None) -> None:
    """Start `opencode serve` detached; on failure, say why (`home_volume` names the volume in the hint)."""
    result = runtime.exec(
        vm, ["sh", "-c", _START_SCRIPT], env={"OPENCODE_SERVER_PASSWORD": password}, timeout_s=60
    )
    if result.exit_code != 0:
        from opencode_sandbox.core.dev_home import diagnose_start_failure
        from opencode_sandbox.services.dev_home_probe import probe_dev_home

        output = result.stderr.strip() or result.stdout.strip()
        diagnosis = diagnose_start_failure(output, probe_dev_home(runtime, vm), home_volume)
        raise SandboxError(f"cannot start opencode serve in {vm}: {diagnosis.reason}", hint=diagnosis.hint)


class BackgroundStart:
    """`opencode serve` starting in the VM while the caller goes on (a `shell` command needs no
    daemon). The setup lock travels with it and is released once the start is over, so a
    concurrent launcher still finds the daemon started, never half-way."""

    def __init__(self, start: Callable[[], None], held: ExitStack) -> None:
        self._start = start
        self._held = held
        self._error: SandboxError | None = None
        self._thread = threading.Thread(target=self._run, name="opencode-serve-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._start()
        except SandboxError as error:
            self._error = error
        finally:
            self._held.close()

    def finish(self, timeout_s: float = 90.0) -> SandboxError | None:
        """Wait for the start; the failure, if it failed or did not finish in time."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            return SandboxError("opencode serve is still being started", hint="run the command again")
        return self._error


def daemon_running(runtime: Runtime, vm: str) -> bool:
    """Whether an `opencode serve` process exists in the VM, answering or not yet."""
    return serve_process_running(runtime, vm) is True


def serve_process_running(runtime: Runtime, vm: str) -> bool | None:
    """True or False when `pgrep` can tell whether `opencode serve` runs in the VM, None otherwise."""
    code = runtime.exec(vm, ["pgrep", "-f", _PATTERN], workdir="/", timeout_s=30).exit_code
    return {0: True, 1: False}.get(code)


def stop_daemon(runtime: Runtime, vm: str) -> None:
    runtime.exec(vm, ["sh", "-c", _STOP_SCRIPT], timeout_s=30)


def daemon_log_tail(runtime: Runtime, vm: str, lines: int = 30) -> str:
    try:
        result = runtime.exec(vm, ["tail", "-n", str(lines), DAEMON_LOG], timeout_s=30)
    except SandboxError as error:
        return f"(the log could not be read: {error.message})"
    return result.stdout.strip() or result.stderr.strip() or EMPTY_LOG


EMPTY_LOG = "(the log is empty)"


_REPORT_TABLES = ("tcp", "tcp6", "udp", "udp6")
_REPORT_SCRIPT = (
    f"pid=$(pgrep -o -f '{_PATTERN}'); [ -n \"$pid\" ] && ps -o pid,stat,etime,time,args -s \"$pid\" 2>/dev/null; "
    + "".join(f"echo '--- {table}'; cat /proc/net/{table} 2>/dev/null; " for table in _REPORT_TABLES)
    + f"echo '--- inside'; curl -s -o /dev/null -m 10 -w '%{{http_code}}' {GUEST_URL}/global/health 2>/dev/null; true"
)


def serve_report(runtime: Runtime, vm: str, printed_nothing: bool) -> tuple[str, str | None]:
    """What `opencode serve` is doing now, for a start failure: the lines to add, and a hint when
    it waits on the network ("" and None when the VM cannot tell)."""
    from opencode_sandbox.core.serve_report import connections, hint_for, summary

    try:
        result = runtime.exec(vm, ["sh", "-c", _REPORT_SCRIPT], workdir="/", timeout_s=30)
    except SandboxError:
        return "", None
    processes, *sections = result.stdout.split("--- ")
    waiting = []
    inside: str | None = None
    for section in sections:
        name, _, text = section.partition("\n")
        if name.strip() == "inside":
            inside = text.strip() or None
        else:
            waiting += connections(text, name.strip())
    return summary(processes, waiting, printed_nothing, inside), hint_for(waiting, inside)


PROCESS_CHECK_S = 5.0


def wait_until_healthy(
    check: Callable[[], bool],
    timeout_s: float,
    still_running: Callable[[], bool] | None = None,
) -> bool:
    """Poll a health check until it answers True or the time is up.

    `still_running` is asked every PROCESS_CHECK_S while the check fails: once it says the
    process is gone, waiting longer cannot help.
    """
    deadline = time.monotonic() + timeout_s
    next_process_check = time.monotonic() + PROCESS_CHECK_S
    delay = 0.1
    while time.monotonic() < deadline:
        if check():
            return True
        if still_running is not None and time.monotonic() >= next_process_check:
            if not still_running():
                return bool(check())
            next_process_check = time.monotonic() + PROCESS_CHECK_S
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)
    return bool(check())
