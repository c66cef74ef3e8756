"""`network log`: what the project VM's network policy refused recently, and why."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from datetime import UTC, datetime

from opencode_sandbox.app import App
from opencode_sandbox.core.egress import EgressPolicy
from opencode_sandbox.core.naming import vm_name
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import Refusal
from opencode_sandbox.services.listing import iso_time, json_list
from opencode_sandbox.ui.table import local_time, render

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


def render_refusals(name: str, found: Sequence[Refusal] | None, policy: EgressPolicy, output_format: str) -> str:
    if found is None:
        return "[]" if output_format == "json" else (
            f"{name} is stopped: what its network policy refuses is recorded only while it runs, anew at each "
            "start. Run the agent again (`opencode-sandbox`) and look while the VM runs.")
    if output_format == "json":
        return json_list(
            {
                "destination": refusal.destination,
                "protocol": refusal.protocol,
                "port": refusal.port,
                "attempts": refusal.attempts,
                "last_seen": iso_time(refusal.last_seen),
                "reason": why(policy, refusal),
            }
            for refusal in found
        )
    if not found:
        return f"Nothing refused by {name}'s network policy ({policy.describe()}): {KEPT}."
    rows = [[local_time(refusal.last_seen), _where(refusal), str(refusal.attempts), why(policy, refusal)]
            for refusal in found]
    table = render(["LAST SEEN", "DESTINATION", "ATTEMPTS", "WHY"], rows, color=False)
    return f"{table}\n{name}, network {policy.describe()}: {KEPT}."


def _where(refusal: Refusal) -> str:
    host = f"[{refusal.destination}]" if ":" in refusal.destination else refusal.destination
    port = f":{refusal.port}" if refusal.port is not None else ""
    return f"{host}{port}/{refusal.protocol}"
