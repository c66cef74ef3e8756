"""`stop` and `kill`: the project's VM on demand."""

from __future__ import annotations

from collections.abc import Callable

from opencode_sandbox.cli.app import App
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import SandboxError


def stop(app: App, remove: bool, echo: Callable[[str], None]) -> None:
    """Stop gracefully; with `remove`, also remove the VM and the state file (volumes stay)."""
    from opencode_sandbox.state.leases import count_live_leases

    slug = app.project.slug
    name = vm_name(slug)
    clients = count_live_leases(app.paths.state_dir, slug)
    if clients and not app.assume_yes:
        raise SandboxError(
            f"{clients} client(s) are attached to {name}; stopping would cut them off",
            hint="detach them first, or stop anyway with `opencode-sandbox --yes stop`",
        )
    runtime = app.runtime
    existing = runtime.get_sandbox(name)
    if existing is None:
        echo(f"No VM for this project ({name}).")
    elif existing.status.is_active:
        runtime.stop_sandbox(name)
        echo(f"Stopped {name}.")
    else:
        echo(f"{name} is already {existing.status.value}.")
    if remove:
        _remove_vm_and_state(app, existing is not None, echo)


def kill(app: App, remove: bool, echo: Callable[[str], None]) -> None:
    """Power off at once; with `remove`, also remove the VM and the state file (volumes stay)."""
    name = vm_name(app.project.slug)
    existing = app.runtime.get_sandbox(name)
    if existing is None:
        echo(f"No VM for this project ({name}).")
    else:
        app.runtime.kill_sandbox(name)
        echo(f"Killed {name}.")
    if remove:
        _remove_vm_and_state(app, existing is not None, echo)


def _remove_vm_and_state(app: App, vm_exists: bool, echo: Callable[[str], None]) -> None:
    slug = app.project.slug
    name = vm_name(slug)
    if vm_exists:
        app.runtime.remove_sandbox(name)
        echo(f"Removed {name}.")
    state = app.state
    recorded = state.load(slug).home_volume
    state.remove(slug)
    if recorded:
        echo(f"Removed the state file; the home volume {recorded} is kept (see `opencode-sandbox volume list`).")
