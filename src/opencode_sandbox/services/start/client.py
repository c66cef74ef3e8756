"""A client of the project VM: the lease it holds from before the start until it leaves, the
attach or the shell, and the idle reaper it leaves watching."""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.app import App
from opencode_sandbox.collector import collect_from_now_on
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.guest.places import GUEST_URL

if TYPE_CHECKING:
    from typing import Protocol

    from opencode_sandbox.core.agents import AgentProfile
    from opencode_sandbox.runtime.base import PreparedCommand
    from opencode_sandbox.services.start.pipeline import ReadyVm

    class StartedEarly(Protocol):
        """What a client starts in the VM as found before the start's checks end."""

        def end(self) -> None:
            """Undo it: the start changed the VM, or failed."""

_WORKTREE_NAME = r"^[a-z0-9]+(?:[-/][a-z0-9]+)*$"


def parse_worktree(value: str) -> tuple[str, str | None]:
    """`NAME[:BASE]`: NAME a slug (`feature/foo` allowed), BASE any git ref."""
    name, _, base = value.partition(":")
    if not re.match(_WORKTREE_NAME, name) or len(name) > 60:
        raise UsageError(
            f"invalid worktree name '{name}'",
            hint="use lower-case letters, digits, '-' and '/', for example -w feature/login:main",
        )
    if ":" in value and not base:
        raise UsageError(f"no base after ':' in '{value}'", hint="write -w NAME:BASE, for example -w fix:main")
    return name, base or None


def other_clients(app: App) -> int:
    from opencode_sandbox.state.leases import count_live_leases

    return count_live_leases(app.paths.state_dir, app.project.slug)


@contextmanager
def client_of_vm(app: App, rebuild: bool, wait_for_daemon: bool = True,
                 start_early: Callable[[], StartedEarly | None] | None = None) -> Iterator[ReadyVm]:
    """Hold a lease from before the VM is ensured until the client leaves, with the idle reaper
    watching from when the VM is ready. Taking the lease first means a reaper stopping the VM
    for idleness finishes before this client looks at it, and then finds it stopped.
    `start_early` starts what can start in the VM as found, ended again unless the start kept
    the VM as it found it."""
    from opencode_sandbox.state.leases import client_lease

    app.ask_git_paths_early()  # git answers while the start loads its modules
    others = other_clients(app)
    ready: ReadyVm | None = None
    with leaving_on_hangup_or_termination():
        try:
            with client_lease(app.paths.state_dir, app.project.slug, " ".join(["opencode-sandbox", *sys.argv[1:]])):
                early = start_early() if start_early is not None and not rebuild else None
                # Loaded only now: the early start need not wait for the pipeline's modules.
                from opencode_sandbox.services.start.pipeline import Start

                try:
                    ready = Start(app).prepare(rebuild, others, wait_for_daemon)
                finally:
                    if early is not None and (ready is None or not ready.kept_as_found):
                        early.end()
                # Watching from now on, the reaper stops the VM even after a client killed outright.
                _hand_to_reaper(app, ready)
                collect_from_now_on()  # attached, or serving, for minutes or hours
                with _bell_for_attention(app):
                    yield ready
        finally:
            if ready is not None:
                try:
                    from opencode_sandbox.services.stopping import sync_git
                    from opencode_sandbox.services.workspace_mode import works_isolated

                    if not works_isolated(app):  # the reaper, told of the detach, syncs an isolated VM at once
                        sync_git(app)
                    _review_guarded_files(app)
                finally:  # a closed terminal can fail the warning; the reaper restarts its wait
                    _hand_to_reaper(app, ready, leaving=True)


@contextmanager
def _bell_for_attention(app: App) -> Iterator[None]:
    """While attached: this terminal's bell rings when the agent needs the user and no desktop
    notification could say so, unless another attached client's rang."""
    from opencode_sandbox.ui.bell import terminal_bell

    ring = terminal_bell() if app.settings.notify else None
    if ring is None:
        yield
        return
    # Loaded only with a terminal to ring: a command run from a script has none.
    from opencode_sandbox.services.attention import BellRinger
    from opencode_sandbox.state_layout import StateLayout

    with BellRinger(StateLayout(app.paths.state_dir).project(app.project.slug), ring):
        yield


_LEAVING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


@contextmanager
def leaving_on_hangup_or_termination() -> Iterator[None]:
    """A closed terminal (SIGHUP) or a `kill` (SIGTERM) ends the client as Ctrl-C does: through
    the cleanup that hands the VM to the idle reaper, which the signals' default action skips."""
    previous = {number: signal.getsignal(number) for number in _LEAVING_SIGNALS}

    def leave(number: int, _frame: object) -> None:
        for each in _LEAVING_SIGNALS:  # a second signal must not cut the cleanup short
            signal.signal(each, signal.SIG_IGN)
        raise SystemExit(128 + number)

    for number in _LEAVING_SIGNALS:
        if previous[number] != signal.SIG_IGN:  # `nohup`: the user asked to outlive the terminal
            signal.signal(number, leave)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def _review_guarded_files(app: App) -> None:
    """At detach: the VM keeps running for other clients, or until the idle reaper stops it."""
    from opencode_sandbox.services.guard.reviews import review
    from opencode_sandbox.services.workspace_mode import guard_runs_after

    if guard_runs_after(app):
        review(app, vm_may_write_after=True, ask_reaper=True)


def _hand_to_reaper(app: App, ready: ReadyVm, leaving: bool = False) -> None:
    from opencode_sandbox.core.quiescence import UNREADABLE_GRACE_S
    from opencode_sandbox.core.stop_mode import StopMode
    from opencode_sandbox.services.reaper_settings import ReaperSettings
    from opencode_sandbox.services.reaper_spawn import spawn_reaper
    from opencode_sandbox.services.workspace_mode import works_isolated

    settings = app.settings
    reaper = ReaperSettings(
        slug=app.project.slug,
        vm_name=ready.name,
        runtime_kind=settings.runtime,
        daemon_url=ready.host_url,
        timeout_s=settings.auto_stop_timeout.total_seconds(),
        mode=StopMode.from_setting(settings.auto_stop_on_active_sessions),
        max_retries=settings.auto_stop_max_session_retries,
        state_root=app.paths.state_dir,
        password=ready.password,
        # A serve still coming up on a slow host cannot answer yet either.
        unreadable_grace_s=max(UNREADABLE_GRACE_S, settings.daemon_start_timeout.total_seconds()),
        project_root=str(app.project.root) if app.project.is_git else "",
        agent=settings.agent,
        agent_title=settings.agent_profile.title,
        notify=settings.notify,
        git_branches=settings.git_sync_branches,
        isolated=works_isolated(app),
    )
    try:
        spawn_reaper(reaper)
    except OSError as error:
        app.console.warn(f"cannot start the idle reaper ({error}); stop the VM with `opencode-sandbox stop`")
        return
    if leaving:
        app.console.verbose(f"idle reaper log: {reaper.project().reaper_log}")


def resolve_worktree(app: App, ready: ReadyVm, worktree: str) -> str:
    """The VM-internal directory of the worktree, created through the daemon when new."""
    from opencode_sandbox.daemon.client import DaemonClient
    from opencode_sandbox.daemon.errors import DaemonError
    from opencode_sandbox.ui.progress import slow_step

    name, base = parse_worktree(worktree)
    client = DaemonClient(ready.host_url, ready.password)
    try:
        existing = client.find_worktree(name.replace("/", "-"))
        if existing is not None:
            if base:
                app.console.warn(f"worktree {existing.name} exists already; ignoring the base {base}")
            return existing.directory
        with slow_step(app.console, f"Creating the worktree {name}"):
            created = client.create_worktree(name.replace("/", "-"), base)
        app.console.info(f"Created the worktree {created.name} at {created.directory}")
        return created.directory
    except DaemonError as error:
        raise SandboxError(f"worktree {name}: {error}", hint="check the name and the base ref") from None
    finally:
        client.close()


def run_attached(app: App, rebuild: bool, worktree: str | None, serve_only: bool,
                 opencode_args: Sequence[str], wait_forever: Callable[[], None]) -> int:
    from opencode_sandbox.core.agents import SessionKind

    profile = app.settings.agent_profile
    if profile.session is SessionKind.TERMINAL:
        return run_terminal_agent(app, rebuild, worktree, serve_only, opencode_args)
    if not serve_only and not sys.stdin.isatty():
        raise UsageError(
            "opencode attach needs a terminal, and standard input is not one",
            hint="run it in a terminal, or use `--serve-only` or `opencode-sandbox shell -- CMD`",
        )
    with client_of_vm(app, rebuild) as ready:
        directory = resolve_worktree(app, ready, worktree) if worktree else None
        if serve_only:
            from opencode_sandbox.services.published_ports import user_ports

            app.console.result(f"URL:      {ready.host_url}")
            app.console.result("user:     opencode")
            app.console.result(f"password: {ready.password}")
            for guest, host in user_ports(ready.ports).items():
                app.console.result(f"port:     http://127.0.0.1:{host} (guest port {guest})")
            app.console.info("Serving; press Ctrl-C to detach (the VM then stops when idle).")
            wait_forever()
            return 0
        argv = ["opencode", "attach", GUEST_URL, *(["--dir", directory] if directory else []), *opencode_args]
        return app.runtime.attach(ready.name, argv, env={"OPENCODE_SERVER_PASSWORD": ready.password},
                                  clipboard=app.settings.terminal_clipboard)


def refuse_opencode_options(profile: AgentProfile, worktree: object, serve_only: bool) -> None:
    """A terminal agent's run refuses the options only opencode's server has."""
    if worktree:
        raise UsageError(f"worktrees (-w) are opencode's; {profile.title} works in the checkout",
                         hint="run without -w, or create a branch in the VM with git")
    if serve_only:
        raise UsageError(f"--serve-only starts opencode's server; {profile.title} has none",
                         hint="run without --serve-only to attach to the agent's session")


def run_terminal_agent(app: App, rebuild: bool, worktree: str | None, serve_only: bool,
                       agent_args: Sequence[str]) -> int:
    """Attach the terminal to the agent's session in the VM, started with the agent when none runs.
    The session outlives this client: a closed terminal leaves the agent working."""
    import os

    from opencode_sandbox.core.naming import vm_name
    from opencode_sandbox.guest.terminal_session import WORKSPACE, attach_command
    from opencode_sandbox.runtime.screen_relay import user_terminal_size
    from opencode_sandbox.services.start.early_session import EarlySession

    profile = app.settings.agent_profile
    refuse_opencode_options(profile, worktree, serve_only)
    if not sys.stdin.isatty():
        raise UsageError(f"{profile.title} needs a terminal, and standard input is not one",
                         hint="run it in a terminal, or use `opencode-sandbox shell -- CMD`")
    terminal = {name: os.environ[name] for name in ("TERM", "COLORTERM") if os.environ.get(name)}

    def start_early() -> EarlySession | None:
        size = user_terminal_size()
        if size is None:
            return None
        return EarlySession.start(app, vm_name(app.project.slug), profile, agent_args, size, terminal or None)

    with client_of_vm(app, rebuild, wait_for_daemon=False, start_early=start_early) as ready:
        return app.runtime.attach(ready.name, attach_command(profile, agent_args), workdir=WORKSPACE,
                                  env=terminal or None, clipboard=app.settings.terminal_clipboard)


def run_shell(app: App, rebuild: bool, root: bool, command: Sequence[str]) -> int:
    user = "root" if root else "dev"
    interactive = sys.stdin.isatty()
    if not command and not interactive:
        raise UsageError(
            "an interactive shell needs a terminal, and standard input is not one",
            hint="give a command: opencode-sandbox shell -- CMD",
        )
    argv = list(command) if command else ["bash", "-l"]
    prepared: list[PreparedCommand] = []

    def prepare_early() -> PreparedCommand | None:
        from opencode_sandbox.core.naming import vm_name
        from opencode_sandbox.services.start.early_command import prepare_command

        made = prepare_command(app, vm_name(app.project.slug), argv, user)
        if made is not None:
            prepared.append(made)
        return made

    try:
        with client_of_vm(app, rebuild, wait_for_daemon=False,
                          start_early=None if interactive else prepare_early) as ready:
            if prepared and ready.kept_as_found:
                return prepared[0].run()
            return app.runtime.attach(ready.name, argv, user=user, workdir="/workspace", tty=interactive,
                                      clipboard=app.settings.terminal_clipboard)
    finally:
        for each in prepared:
            each.end()  # nothing once it ran
