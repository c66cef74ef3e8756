"""The operations of `operations.py` as shell commands, run through the runtime's `exec`."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.guest.places import EMPTY_LOG, GUEST_URL, HOME, SERVER_LOG

if TYPE_CHECKING:
    from opencode_sandbox.core.agent_activity import AgentReport
    from opencode_sandbox.core.dev_home import HomeProbe
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.types import ExecResult

# Every address family: offline, msb gives a microVM IPv6 alone and forwards its published ports
# over IPv6, so a server on 0.0.0.0 alone never answers the host. `::` takes IPv4 too.
_SERVE = f"opencode serve --hostname :: --port {DAEMON_PORT}"
_PATTERN = "opencode serve --hostname"
_START = (
    "command -v opencode >/dev/null || { echo 'opencode: not found on the PATH' >&2; exit 127; } && "
    f'mkdir -p "$(dirname {SERVER_LOG})" && '
    f"setsid -f sh -c 'exec {_SERVE} >>{SERVER_LOG} 2>&1' </dev/null >/dev/null 2>&1"
)
_STOP = f"pkill -KILL -f '{_PATTERN}' ; true"
_REPORT_TABLES = ("tcp", "tcp6", "udp", "udp6")
_REPORT = (
    f"pid=$(pgrep -o -f '{_PATTERN}'); [ -n \"$pid\" ] && ps -o pid,stat,etime,time,args -s \"$pid\" 2>/dev/null; "
    + "".join(f"echo '--- {table}'; cat /proc/net/{table} 2>/dev/null; " for table in _REPORT_TABLES)
    + f"echo '--- inside'; curl -s -o /dev/null -m 10 -w '%{{http_code}}' {GUEST_URL}/global/health 2>/dev/null; true"
)
_UNPACK = ["tar", "-x", "--no-overwrite-dir", "-C", HOME, "-f", "-"]
_INNER_DOCKER = "/usr/local/bin/opencode-sandbox-start-docker"


class ShellGuest:
    def __init__(self, runtime: Runtime, vm: str) -> None:
        self.runtime = runtime
        self.vm = vm

    def start_server(self, password: str) -> ExecResult:
        return self.runtime.exec(self.vm, ["sh", "-c", _START], env={"OPENCODE_SERVER_PASSWORD": password},
                                 timeout_s=60)

    def server_running(self) -> bool | None:
        code = self.runtime.exec(self.vm, ["pgrep", "-f", _PATTERN], workdir="/", timeout_s=30).exit_code
        return {0: True, 1: False}.get(code)

    def stop_server(self) -> None:
        self.runtime.exec(self.vm, ["sh", "-c", _STOP], timeout_s=30)

    def server_log(self, lines: int = 30) -> str:
        # A server never started has no log: nothing in it, not a failure to read it.
        script = f'[ ! -e "$1" ] || tail -n {int(lines)} "$1"'
        result = self.runtime.exec(self.vm, ["sh", "-c", script, "log", SERVER_LOG], timeout_s=30)
        return result.stdout.strip() or result.stderr.strip() or EMPTY_LOG

    def server_report(self) -> str:
        return self.runtime.exec(self.vm, ["sh", "-c", _REPORT], workdir="/", timeout_s=30).stdout

    def probe_home(self) -> HomeProbe | None:
        from opencode_sandbox.core.dev_home import read_probe

        try:
            result = self.runtime.exec(self.vm, ["sh", "-c", _probe_script()], workdir="/", timeout_s=30)
        except SandboxError:
            return None
        return read_probe(result.stdout)

    def unpack_home(self, archive: bytes) -> ExecResult:
        return self.runtime.exec(self.vm, _UNPACK, workdir=HOME, stdin=archive, timeout_s=120)

    def start_inner_docker(self) -> ExecResult:
        return self.runtime.exec(self.vm, [_INNER_DOCKER], user="root", timeout_s=120)

    def agent_report(self) -> AgentReport:
        from opencode_sandbox.core.agent_activity import parse_report
        from opencode_sandbox.guest.terminal_session import REPORT_EXEC_TIMEOUT_S, REPORT_OUTPUT_LIMIT, report_script

        result = self.runtime.exec(self.vm, ["sh", "-c", report_script()], workdir="/",
                                   timeout_s=REPORT_EXEC_TIMEOUT_S, output_limit=REPORT_OUTPUT_LIMIT)
        return parse_report(result.stdout)


def _probe_script() -> str:
    """Run as dev (workdir /): prints the `probe:` lines `core.dev_home.read_probe` reads. Made
    only when something failed (and by `doctor`), so a good start never loads the probe."""
    from opencode_sandbox.core.dev_home import FOLDERS, PROBE_PREFIX

    return (
        f'echo "{PROBE_PREFIX}dev $(id -u) $(id -g)"; '
        f'echo "{PROBE_PREFIX}opencode $(command -v opencode || true)"; '
        f"for folder in {' '.join(FOLDERS)}; do "
        '[ -d "$folder" ] || continue; '
        'if [ ! -w "$folder" ] || [ ! -x "$folder" ]; then '
        f'echo "{PROBE_PREFIX}blocked $folder $(stat -c \'%u %g %a\' "$folder")"; break; fi; '
        "done"
    )
