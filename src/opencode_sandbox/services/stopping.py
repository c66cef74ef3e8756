"""`stop` and `kill`: the project's VM on demand."""

from __future__ import annotations

import time
from collections.abc import Callable

from opencode_sandbox.app import App
from opencode_sandbox.core.attached_clients import cut_off_note, must_ask_before_stopping, stop_question
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.ui.prompts import confirm


def stop(app: App, remove: bool, ask: Callable[[str], bool] | None = None) -> None:
    """Stop gracefully; with `remove`, also remove the VM and the state file (volumes stay).

    Clients still attached are cut off: a user at a terminal is asked first, with the
    clients named; without a terminal, or with --yes, the stop goes ahead and says how
    many it cut off.
    """
    from opencode_sandbox.state.leases import attached_clients

    slug = app.project.slug
    name = vm_name(slug)
    runtime = app.runtime
    existing = runtime.get_sandbox(name)
    if existing is None and remove:
        _refuse_a_vm_elsewhere(app, name)
    running = existing is not None and existing.status.is_active
    clients = attached_clients(app.paths.state_dir, slug) if running else []
    asked = ask or (lambda text: confirm(app.console, text, default=True, interactive=True))
    if must_ask_before_stopping(clients, app.interactive) and not asked(stop_question(name, clients, time.time())):
        app.console.result(f"{name} keeps running.")
        return
    if existing is None:
        app.console.result(f"No VM for this project ({name}).")
    elif running:
        sync_git(app)
        runtime.stop_sandbox(name)
        app.console.result(" ".join(filter(None, [f"Stopped {name}.", cut_off_note(len(clients))])))
    else:
        runtime.stop_sandbox(name)  # what runs beside it (docker's egress proxy) stops too
        app.console.result(f"{name} is already {existing.status.value}.")
    _review_guarded_files(app)
    if remove:
        _remove_vm_and_state(app, existing is not None)


def kill(app: App, remove: bool) -> None:
    """Power off at once; with `remove`, also remove the VM and the state file (volumes stay)."""
    name = vm_name(app.project.slug)
    existing = app.runtime.get_sandbox(name)
    if existing is None and remove:
        _refuse_a_vm_elsewhere(app, name)
    if existing is None:
        app.console.result(f"No VM for this project ({name}).")
    else:
        app.runtime.kill_sandbox(name)
        app.console.result(f"Killed {name}.")
    _review_guarded_files(app)
    if remove:
        _remove_vm_and_state(app, existing is not None)



def _refuse_a_vm_elsewhere(app: App, name: str) -> None:
    """A removal that finds no VM on the chosen runtime while the other runtime holds the project's
    VM stops before anything: the state file (and with it the home volume the next start uses) is
    that VM's, and removing it would leave the next start on that runtime a new, empty home."""
    from opencode_sandbox.errors import SandboxError, UsageError

    other = app.other_runtime
    if other is None:
        return
    try:
        found = other.get_sandbox(name)
    except SandboxError:
        return  # it cannot be asked (its engine is down, say); the removal goes on as it always did
    if found is not None:
        chosen, where = app.runtime.kind.value, other.kind.value
        raise UsageError(f"no VM for this project on the {chosen} runtime; its VM {name} is on the {where} runtime",
                         hint=f"remove it there: `opencode-sandbox --runtime {where} stop -f` (the home volume stays)")

def sync_git(app: App, work_tree: bool = True) -> None:
    """The VM's last commits to the host (and the host's to the VM) while it still runs; with
    `work_tree`, in the isolated mode, the commit of its whole work tree too."""
    if not app.project.is_git:
        return
    from opencode_sandbox.services.vm_git import sync_project, tell_held

    project_dir = app.state.project_dir(app.project.slug)
    report = sync_project(app.runtime, vm_name(app.project.slug), app.project.root, project_dir,
                          lambda line: app.console.verbose(f"git: {line}"), app.git_paths,
                          app.settings.git_sync_branches, work_tree=work_tree)
    tell_held(app.console, project_dir)
    if report.failure:
        from opencode_sandbox.core.guard import shown

        app.console.warn(f"the git sync with the VM failed: {shown(report.failure)}",
                         hint="the VM's work stays in the VM; `opencode-sandbox diff` and the refs under "
                              "refs/sandbox/ show what reached the host before, and the reaper's log says more")
    what, _, branch = report.host.partition(" ")
    if what in ("diverged", "differs", "staged", "busy"):
        from opencode_sandbox.core.vm_git import SANDBOX_PREFIX

        app.console.warn(f"the VM's commits on {branch} are kept as {SANDBOX_PREFIX}{branch}; "
                         f"`git merge {SANDBOX_PREFIX}{branch}` brings them into yours "
                         "(`opencode-sandbox guard status` shows where each branch stands).")


def _review_guarded_files(app: App) -> None:
    """The VM is down: what it changed among the files the host runs is shown and kept or
    reverted, and from now on changes there are the user's. The idle reaper, while it still
    watches, is asked first: once it has looked at what the VM wrote up to its last write, the
    checkout need not be walked."""
    from opencode_sandbox.services.guard.reviews import review
    from opencode_sandbox.services.workspace_mode import guard_runs_after

    if guard_runs_after(app):
        review(app, vm_may_write_after=False, ask_reaper=True)


def _remove_vm_and_state(app: App, vm_exists: bool) -> None:
    slug = app.project.slug
    name = vm_name(slug)
    if vm_exists:
        app.runtime.remove_sandbox(name)
        app.console.result(f"Removed {name}.")
    state = app.state
    recorded = state.load(slug).home_volume
    state.remove(slug)
    if recorded:
        app.console.result(f"Removed the state file; the home volume {recorded} is kept "
                           "(see `opencode-sandbox volume list`).")
