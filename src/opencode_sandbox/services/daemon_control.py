"""Starting, restarting and checking `opencode serve` inside the VM."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.state.files import ensure_private_dir, write_atomic
from opencode_sandbox.state_layout import ProjectLayout

if TYPE_CHECKING:
    from opencode_sandbox.guest.operations import Guest

def password_path(project_state_dir: Path) -> Path:
    return ProjectLayout(project_state_dir).daemon_password


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


def start_daemon(guest: Guest, password: str, home_volume: str | None = None) -> None:
    """Start `opencode serve` detached; on failure, say why (`home_volume` names the volume in the hint)."""
    result = guest.start_server(password)
    if result.exit_code != 0:
        from opencode_sandbox.core.dev_home import diagnose_start_failure

        output = result.stderr.strip() or result.stdout.strip()
        diagnosis = diagnose_start_failure(output, guest.probe_home(), home_volume)
        raise SandboxError(f"cannot start opencode serve in {guest.vm}: {diagnosis.reason}", hint=diagnosis.hint)


def daemon_log_tail(guest: Guest, lines: int = 30) -> str:
    try:
        return guest.server_log(lines)
    except SandboxError as error:
        return f"(the log could not be read: {error.message})"


def serve_report(guest: Guest, printed_nothing: bool) -> tuple[str, str | None]:
    """What `opencode serve` is doing now, for a start failure: the lines to add, and a hint when
    it waits on the network ("" and None when the VM cannot tell)."""
    from opencode_sandbox.core.serve_report import connections, hint_for, summary

    try:
        report = guest.server_report()
    except SandboxError:
        return "", None
    processes, *sections = report.split("--- ")
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
