"""The clients attached to a project VM, as `stop` tells the user about them."""

from __future__ import annotations

from collections.abc import Sequence

from opencode_sandbox.core.records import Record


class AttachedClient(Record):
    """One client holding a lease: its process, what it runs, and since when (Unix time)."""

    pid: int
    command: str = ""
    since: float | None = None


def must_ask_before_stopping(clients: Sequence[AttachedClient], interactive: bool) -> bool:
    """Only a user at a terminal is asked; without one (or with --yes) `stop` stops."""
    return bool(clients) and interactive


def describe_client(client: AttachedClient, now: float) -> str:
    command = client.command or "an opencode-sandbox client"
    if len(command) > 70:
        command = command[:69] + "…"
    attached = f", attached {_age(now - client.since)} ago" if client.since is not None else ""
    return f"pid {client.pid}: {command}{attached}"


def stop_question(vm: str, clients: Sequence[AttachedClient], now: float) -> str:
    listed = "\n".join(f"  {describe_client(client, now)}" for client in clients)
    count = len(clients)
    attached = "1 client is" if count == 1 else f"{count} clients are"
    return f"{attached} attached to {vm}:\n{listed}\nStop the VM anyway?"


def cut_off_note(count: int) -> str:
    """What a stop did to the clients that were attached; empty when there were none."""
    if not count:
        return ""
    return "1 attached client was cut off." if count == 1 else f"{count} attached clients were cut off."


def _age(seconds: float) -> str:
    whole = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"
