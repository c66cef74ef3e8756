"""The signal when the agent needs you: a turn ended, or it asks a question or a permission.

The project's one idle reaper watches the agent every few seconds (`AttentionWatch`) and signals
each event once: a desktop notification where one is available (`notify-send`, `osascript`), else
it records the event for the attached clients, one of which rings the terminal bell
(`BellRinger`). The messages are the tool's own words: nothing the VM wrote reaches the host's
notification.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.agents import DEFAULT_AGENT, PROFILES, activity_of
from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.attention import Attention, agent_attention, daemon_attention
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.state.files import ensure_private_dir, write_atomic
from opencode_sandbox.state_layout import ProjectLayout

if TYPE_CHECKING:
    from opencode_sandbox.core.agent_activity import AgentReport
    from opencode_sandbox.core.quiescence import DaemonActivity
    from opencode_sandbox.guest.operations import GuestFactory
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.services.reaper_settings import ReaperSettings

WATCH_INTERVAL_S = 2.0
COST_FACTOR = 3.0
"""A VM slow to answer (an emulated one) is asked at most a quarter of the time."""
BELL_POLL_S = 0.5
SIGNAL_GAP_S = 10.0
"""At most one signal in this long: the VM writes the agent's state, and could write a new event each second."""
NOTIFY_TIMEOUT_S = 10.0


def desktop_command(attention: Attention, environ: Mapping[str, str], which: Callable[[str], str | None],
                    platform: str = sys.platform) -> list[str] | None:
    """The command that shows `attention` on the desktop, None where there is no desktop to show it on."""
    if platform == "darwin":
        osascript = which("osascript")
        if osascript:  # the words are arguments, never part of the script: a folder's name is data
            return [osascript, "-e", "on run argv", "-e",
                    "display notification (item 1 of argv) with title (item 2 of argv)", "-e", "end run",
                    attention.body, attention.title]
        return None
    notify_send = which("notify-send")
    if notify_send and any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")):
        return [notify_send, "--app-name=opencode-sandbox", attention.title, attention.body]
    return None


def _title(settings: ReaperSettings) -> str:
    """The agent's name in a notification: as the start recorded it, else its built-in profile's."""
    built_in = PROFILES.get(settings.agent)
    return settings.agent_title or (built_in.title if built_in is not None else settings.agent)


class AttentionWatch:
    """In the idle reaper: reads what the agent does and signals what needs the user, once each."""

    def __init__(self, runtimes: Callable[[RuntimeKind], Runtime],
                 read_daemon: Callable[[ReaperSettings], DaemonActivity], log: Callable[[str], None],
                 guests: GuestFactory | None = None, clock: Callable[[], float] = time.monotonic,
                 run: Callable[[Sequence[str]], object] | None = None,
                 environ: Mapping[str, str] = os.environ) -> None:
        self._runtimes = runtimes
        self._read_daemon = read_daemon
        self._log = log
        self._guests = guests
        self._clock = clock
        self._run = run or _run_quietly
        self._environ = environ
        self._next = 0.0
        self._signalled: float | None = None
        self._agent_before: AgentReport | None = None
        self._daemon_before: DaemonActivity | None = None

    def due(self) -> bool:
        return self._clock() >= self._next

    def __call__(self, settings: ReaperSettings) -> None:
        began = self._clock()
        if settings.notify:
            attention = self._look(settings)
            if attention is not None and (self._signalled is None or began - self._signalled >= SIGNAL_GAP_S):
                self._signalled = began
                self._signal(settings, attention)
        self._next = self._clock() + max(WATCH_INTERVAL_S, COST_FACTOR * (self._clock() - began))

    def _look(self, settings: ReaperSettings) -> Attention | None:
        project = os.path.basename(settings.project_root) or settings.slug
        try:
            if settings.agent == DEFAULT_AGENT:
                activity = self._read_daemon(settings)
                attention = daemon_attention(self._daemon_before, activity, project)
                self._daemon_before = activity
                return attention
            from opencode_sandbox.guest.shell import ShellGuest

            guests = self._guests or ShellGuest
            report = guests(self._runtimes(settings.runtime_kind), settings.vm_name).agent_report()
        except SandboxError:
            return None  # not readable now: the next reading compares with the last good one
        source = activity_of(settings.agent)
        if source is ActivitySource.TERMINAL:
            from opencode_sandbox.core.terminal_activity import with_output_state

            report = with_output_state(self._agent_before, report)
        attention = agent_attention(self._agent_before, report, _title(settings), project, source)
        self._agent_before = report
        return attention

    def _signal(self, settings: ReaperSettings, attention: Attention) -> None:
        import shutil  # in the reaper alone: it loads three compression modules

        command = desktop_command(attention, self._environ, shutil.which)
        if command is not None:
            self._log(f"notifying: {attention.body}")
            self._run(command)
            return
        self._log(f"{attention.body}: ringing the bell of an attached client")
        layout = settings.project()
        ensure_private_dir(layout.folder)
        write_atomic(layout.attention, os.urandom(8).hex() + "\n", durable=False)


def _run_quietly(command: Sequence[str]) -> object:
    try:
        return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=NOTIFY_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def _event(layout: ProjectLayout) -> str:
    try:
        return layout.attention.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def claim(layout: ProjectLayout, event: str) -> bool:
    """True for the first client to claim `event`: that one rings, the others stay quiet."""
    descriptor = os.open(layout.attention_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if handle.read().strip() == event:
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(event)
        return True


class BellRinger:
    """In an attached client: rings its terminal's bell for each event the reaper records, unless
    another client rang it first."""

    def __init__(self, layout: ProjectLayout, ring: Callable[[], None], poll_s: float = BELL_POLL_S) -> None:
        self._layout = layout
        self._ring = ring
        self._poll_s = poll_s
        self._stopped = threading.Event()
        self._seen = _event(layout)
        self._thread = threading.Thread(target=self._watch, name="bell", daemon=True)

    def __enter__(self) -> BellRinger:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=2 * self._poll_s)

    def _watch(self) -> None:
        while not self._stopped.wait(self._poll_s):
            event = _event(self._layout)
            if not event or event == self._seen:
                continue
            self._seen = event
            with contextlib.suppress(OSError):
                if claim(self._layout, event):
                    self._ring()
