"""The daemon step of a start: carries out `plan_daemon`, asking only what each plan asks."""

from __future__ import annotations

from collections.abc import Callable

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.lifecycle import DaemonAction, DaemonFacts, DaemonPlan, plan_daemon
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import BootFailed, SandboxError
from opencode_sandbox.guest.places import EMPTY_LOG
from opencode_sandbox.services import daemon_control
from opencode_sandbox.ui.progress import slow_step

if TYPE_CHECKING:
    from opencode_sandbox.guest.operations import Guest
    from opencode_sandbox.ui.console import Console


class DaemonTarget(Record):
    """The server one start keeps, starts or restarts."""

    host_url: str
    """The server on the host's loopback."""
    password: str
    home_volume: str | None
    """Named in the hint when the server cannot start for its home."""
    start_timeout_s: float
    """How long a starting server may take to answer (`daemon-start-timeout`)."""


class DaemonStep:
    def __init__(self, guest: Guest, console: Console, target: DaemonTarget,
                 ask_restart: Callable[[int], bool], record_started: Callable[[], None]) -> None:
        """`ask_restart(other_clients)`: whether to restart now; `record_started`: notes the
        configuration the new server runs with."""
        self.guest = guest
        self.console = console
        self.vm = guest.vm
        self.host_url = target.host_url
        self.password = target.password
        self.home_volume = target.home_volume
        self.start_timeout_s = target.start_timeout_s
        self.ask_restart = ask_restart
        self.record_started = record_started
        self.carried_out: DaemonPlan | None = None

    def predict(self, facts: DaemonFacts) -> DaemonPlan:
        """The plan after the questions that change nothing (the dry run): it stops at a question
        for the user and at a wait."""
        while True:
            plan = plan_daemon(facts)
            if plan.action is DaemonAction.CHECK_HEALTH:
                facts = facts._replace(healthy=self._healthy())
            elif plan.action is DaemonAction.CHECK_PROCESS:
                facts = facts._replace(serve_running=self.guest.server_running() is True)
            else:
                return plan

    def ensure(self, facts: DaemonFacts) -> None:
        """A serving daemon, unless the caller needs none (`facts.wait` False: left as it is)."""
        while True:
            plan = plan_daemon(facts)
            if plan.action is DaemonAction.CHECK_HEALTH:
                facts = facts._replace(healthy=self._healthy())
            elif plan.action is DaemonAction.CHECK_PROCESS:
                facts = facts._replace(serve_running=self.guest.server_running() is True)
            elif plan.action is DaemonAction.ASK_RESTART:
                facts = facts._replace(restart_approved=self.ask_restart(facts.other_clients))
            elif plan.action is DaemonAction.WAIT:
                with slow_step(self.console, "Waiting for opencode serve, started earlier, to answer"):
                    came_up = self._wait_until_healthy()
                facts = facts._replace(came_up=came_up)
            else:
                break
        self.carried_out = self.carried_out or plan
        self.console.verbose(f"daemon: {plan.action.value} ({plan.reason})")
        if plan.action in (DaemonAction.KEEP, DaemonAction.LEAVE):
            return
        if plan.action is DaemonAction.RESTART:
            self.guest.stop_server()
        self._start_and_wait()

    def _healthy(self) -> bool:
        from opencode_sandbox.daemon.health import is_serving

        return is_serving(self.host_url, self.password)

    def _serve_alive(self) -> bool:
        try:
            return self.guest.server_running() is not False
        except SandboxError:
            return True

    def _start_and_wait(self) -> None:
        with slow_step(self.console, "Starting opencode serve"):
            daemon_control.start_daemon(self.guest, self.password, self.home_volume)
            if not self._wait_until_healthy():
                raise self._failure()
        self.record_started()

    def _wait_until_healthy(self) -> bool:
        return daemon_control.wait_until_healthy(self._healthy, self.start_timeout_s, still_running=self._serve_alive)

    def _failure(self) -> BootFailed:
        from opencode_sandbox.core.dev_home import home_problem

        home = home_problem(self.guest.probe_home(), self.home_volume)
        if home is not None:
            return BootFailed(f"opencode serve did not come up in {self.vm}: {home.reason}", hint=home.hint)
        tail = daemon_control.daemon_log_tail(self.guest)
        if not self._serve_alive():
            return BootFailed(
                f"opencode serve exited before it answered in {self.vm}; the end of its log:\n{tail}",
                hint="fix the cause above (often the opencode configuration), then run again",
            )
        doing, network_hint = daemon_control.serve_report(self.guest, tail == EMPTY_LOG)
        shown = f"{tail}\n{doing}" if doing else tail
        return BootFailed(
            f"opencode serve did not answer within {self.start_timeout_s:g} s in {self.vm}; "
            f"the end of its log:\n{shown}",
            hint=network_hint or "fix the cause above (often the opencode configuration), then run again; on a slow "
            "host (nested or emulated virtualization) raise daemon-start-timeout",
        )
