"""What the VM sends the host's git is bounded by what it costs the host, not by its size on the
wire: a pack of a few kilobytes whose deltas declare gigabytes, and names that draw on a terminal."""

from __future__ import annotations

import hashlib
import os
import resource
import struct
import subprocess
import time
import zlib
from pathlib import Path
from typing import BinaryIO

import pytest

from opencode_sandbox.services.reaper import ReaperLog
from opencode_sandbox.services.vm_git import INDEX_MEMORY_LIMIT, index_pack
from opencode_sandbox.state_layout import ProjectLayout

DECLARED = 2 << 30
"""What the one delta of the pack below says its object inflates to."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _object_header(kind: int, size: int) -> bytes:
    first, size = (kind << 4) | (size & 15), size >> 4
    out = bytearray()
    while size:
        out.append(first | 0x80)
        first, size = size & 0x7F, size >> 7
    out.append(first)
    return bytes(out)


def delta_bomb() -> bytes:
    """A pack of one 64 KiB blob and one delta against it that copies it over and over, declaring
    `DECLARED` bytes: each copy instruction is one byte (`0x80`: 64 KiB from offset 0)."""
    base = os.urandom(65536)
    first = _object_header(3, len(base)) + zlib.compress(base)
    delta = _varint(len(base)) + _varint(DECLARED) + b"\x80" * (DECLARED // 65536)
    second = _object_header(6, len(delta)) + _varint_offset(len(first)) + zlib.compress(delta, 9)
    pack = b"PACK" + struct.pack(">II", 2, 2) + first + second
    return pack + hashlib.sha1(pack).digest()


def _varint_offset(distance: int) -> bytes:
    out = bytearray([distance & 0x7F])
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)


def test_a_pack_whose_deltas_declare_gigabytes_is_refused_within_the_memory_bound(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    pack = delta_bomb()
    assert len(pack) < 200_000
    began = time.monotonic()
    with _file_of(tmp_path, pack) as handle:
        indexed = index_pack(tmp_path, handle)
    assert indexed.returncode != 0, "the host's git inflated the VM's delta in full"
    assert time.monotonic() - began < 60
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak_kib * 1024 <= INDEX_MEMORY_LIMIT, f"a child of this test reached {peak_kib} KiB"


def _file_of(folder: Path, data: bytes) -> BinaryIO:
    path = folder / "incoming.pack"
    path.write_bytes(data)
    return path.open("rb")


def test_what_the_vm_printed_reaches_the_reapers_log_escaped(tmp_path: Path) -> None:
    log = ReaperLog(ProjectLayout(tmp_path))
    log("git sync failed: \x1b]0;title\x07\x1b[2J fake line\nsecond line")
    written = (tmp_path / "reaper.log").read_text()
    assert "\x1b" not in written and "\x07" not in written
    assert written.count("\n") == 1, "one message, one line: the VM cannot make lines of its own"


def test_the_vms_objects_the_host_takes_in_a_day_are_bounded(tmp_path: Path) -> None:
    from opencode_sandbox.services.git_sync import daily_quota
    from opencode_sandbox.services.git_sync.host_git import GitSyncError

    now = 1_000_000.0
    for hour in range(20):
        daily_quota.take(tmp_path, 100 << 20, now + hour * 60)
    with pytest.raises(GitSyncError, match="in the last 24 hours"):
        daily_quota.take(tmp_path, 100 << 20, now + 3600)
    daily_quota.take(tmp_path, 100 << 20, now + daily_quota.DAY_S + 60)  # the first bundles aged out
