"""Objects of the host's store read by id, within bounds: the VM picks how many there are and how
large."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_git import is_object_id
from opencode_sandbox.services.git_sync import host_git

BLOB = "blob"
_HEADER_BYTES = 64 + 1 + 6 + 1 + 20 + 1
"""The longest line `git cat-file --batch-check` prints for one object."""


class Found(Record):
    kind: str
    """The object's type (BLOB for a file or a link's target), or "missing"."""
    size: int = 0


def look_up(root: Path, ids: Iterable[str], object_format: str) -> dict[str, Found]:
    """Each object's type and size, read without its content."""
    wanted = sorted({each for each in ids if is_object_id(each, object_format) and each.strip("0")})
    if not wanted:
        return {}
    listed = host_git.bounded(root, "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)",
                              stdin="".join(each + "\n" for each in wanted).encode(),
                              limit=len(wanted) * _HEADER_BYTES)
    found: dict[str, Found] = {}
    for line in listed.decode("ascii", errors="replace").splitlines():
        words = line.split()
        if len(words) == 3 and words[2].isdigit():
            found[words[0]] = Found(words[1], int(words[2]))
        elif len(words) == 2 and words[1] == "missing":
            found[words[0]] = Found("missing")
    return found


def contents(root: Path, ids: Iterable[str], object_format: str, limit: int) -> dict[str, bytes]:
    """The content of each blob, `host_git.TooMuch` past `limit` bytes in all."""
    wanted = sorted({each for each in ids if is_object_id(each, object_format)})
    if not wanted:
        return {}
    out = host_git.bounded(root, "cat-file", "--batch", stdin="".join(each + "\n" for each in wanted).encode(),
                           limit=limit + len(wanted) * (_HEADER_BYTES + 1))
    found: dict[str, bytes] = {}
    position = 0
    while position < len(out):
        end = out.index(b"\n", position)
        words = out[position:end].decode("ascii", errors="replace").split()
        position = end + 1
        if len(words) != 3 or not words[2].isdigit():
            continue  # "<id> missing"
        size = int(words[2])
        if words[1] == BLOB:
            found[words[0]] = out[position:position + size]
        position += size + 1
    return found


def blob_id(data: bytes, object_format: str) -> str:
    """The id git gives a blob of `data`."""
    digest = hasher(object_format)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def hasher(object_format: str) -> hashlib._Hash:
    return hashlib.sha256() if object_format == "sha256" else hashlib.sha1()
