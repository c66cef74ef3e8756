"""`network log`: what the project VM's network policy refused recently, and why."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

from opencode_sandbox.app import App
from opencode_sandbox.core.egress import EgressPolicy
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import Refusal

KEPT = "what the policy refused in the last hour while the VM ran"


def refusals(app: App) -> tuple[str, list[Refusal] | None]:
    """The project VM's name and its refusals, newest first; None while it is stopped."""
    name = vm_name(app.project.slug)
    info = app.runtime.get_sandbox(name)
    if info is None:
        raise UsageError(f"this project has no VM ({name}), so nothing was refused",
                         hint="start it with `opencode-sandbox`, then look again")
    if not info.status.is_active:
        return name, None
    found = app.runtime.refusals(name)
    return name, sorted(found, key=lambda refusal: refusal.last_seen or datetime.min.replace(tzinfo=UTC),
                        reverse=True)


def why(policy: EgressPolicy, refusal: Refusal) -> str:
    """Why `refusal`'s destination was refused: as the runtime recorded it, else the policy's
    reason as judged now."""
    if refusal.reason:
        return refusal.reason
    from opencode_sandbox.runtime.host_addresses import host_public_addresses

    try:
        address = ipaddress.ip_address(refusal.destination)
    except ValueError:
        address = None
    verdict = policy.judge(refusal.destination, address, refusal.port or 0, frozenset(host_public_addresses()))
    return verdict.reason if not verdict.allowed else "refused by the policy the VM was started with"




