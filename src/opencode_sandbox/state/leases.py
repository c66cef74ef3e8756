"""Client leases: one locked file per attached client, so that a dead client's lease is gone.

Each client holds an exclusive `flock` on its own file in `<state_root>/<slug>/leases/`. The
kernel drops the lock when the process dies, however it dies, so a lease file whose lock can
be taken belongs to nobody and is removed by whoever counts. The file says who holds it: the
process id, its command and when it attached (one JSON line), which `stop` shows. A lease file is locked under a
temporary name first and only then renamed into place, so a counter never sees an unlocked
live lease.

Taking a lease and stopping the VM exclude each other through `stop_guard`: the reaper
counts leases and stops the VM while holding it, and `client_lease` waits for it, so a
client that attaches during a stop finds the VM stopped (and starts it) instead of losing it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from opencode_sandbox.core.attached_clients import AttachedClient
from opencode_sandbox.core.records import Record
from opencode_sandbox.state.files import ensure_private_dir
from opencode_sandbox.state_layout import StateLayout

LEASE_SUFFIX = ".lease"


def leases_dir(state_root: Path, slug: str) -> Path:
    return StateLayout(state_root).project(slug).leases


class Lease(Record):
    path: Path
    descriptor: int


def acquire_lease(state_root: Path, slug: str, command: str = "") -> Lease:
    """Take a new lease for this process, running `command`; release it with `release_lease`."""
    folder = leases_dir(state_root, slug)
    ensure_private_dir(folder)
    token = f"{os.getpid()}-{os.urandom(6).hex()}"
    staging = folder / f".{token}.new"
    descriptor = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder = {"pid": os.getpid(), "command": command, "since": time.time()}
        os.write(descriptor, (json.dumps(holder) + "\n").encode())
        path = folder / f"{token}{LEASE_SUFFIX}"
        os.rename(staging, path)
    except BaseException:
        os.close(descriptor)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        raise
    return Lease(path, descriptor)


def release_lease(lease: Lease) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lease.path)
    with contextlib.suppress(OSError):
        os.close(lease.descriptor)


@contextlib.contextmanager
def client_lease(state_root: Path, slug: str, command: str = "") -> Iterator[Lease]:
    """Hold a lease while the block runs; waits while the VM is being stopped for idleness."""
    with stop_guard(state_root, slug):
        lease = acquire_lease(state_root, slug, command)
    try:
        yield lease
    finally:
        release_lease(lease)


def count_live_leases(state_root: Path, slug: str) -> int:
    """The leases whose holder is alive; leases of dead holders are removed on the way."""
    return len(attached_clients(state_root, slug))


def attached_clients(state_root: Path, slug: str) -> list[AttachedClient]:
    """The holders of live leases, earliest first; leases of dead holders are removed on the way."""
    folder = leases_dir(state_root, slug)
    try:
        candidates = [path for path in folder.iterdir() if path.name.endswith(LEASE_SUFFIX)]
    except FileNotFoundError:
        return []
    holders = [holder for holder in map(_live_holder, candidates) if holder is not None]
    return sorted(holders, key=lambda holder: (holder.since or 0.0, holder.pid))


def _live_holder(path: Path) -> AttachedClient | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_of(os.read(descriptor, 64 * 1024).decode(errors="replace"), path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return None
    finally:
        os.close(descriptor)


def _holder_of(text: str, path: Path) -> AttachedClient:
    """The holder a lease file names (a file of an older version holds only the process id)."""
    try:
        recorded = json.loads(text)
    except ValueError:
        recorded = None
    if isinstance(recorded, int):
        return AttachedClient(recorded)
    if not isinstance(recorded, dict):
        recorded = {}
    pid, since = recorded.get("pid"), recorded.get("since")
    return AttachedClient(
        pid=pid if isinstance(pid, int) else int(path.name.split("-", 1)[0]),
        command=str(recorded.get("command") or ""),
        since=float(since) if isinstance(since, int | float) else None,
    )


@contextlib.contextmanager
def stop_guard(state_root: Path, slug: str) -> Iterator[None]:
    """Held while leases are taken, and while the reaper decides and stops the VM."""
    project = StateLayout(state_root).project(slug)
    ensure_private_dir(project.folder)
    descriptor = os.open(project.stop_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
