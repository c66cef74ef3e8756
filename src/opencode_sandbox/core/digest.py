"""SHA-256 for slugs, fingerprints and content hashes.

The interpreter's own implementation is used where it has one: importing hashlib loads
OpenSSL first, which costs more than a warm start can spare. The digests are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Protocol

    class Sha256(Protocol):
        def update(self, data: bytes, /) -> None: ...

        def digest(self) -> bytes: ...

        def hexdigest(self) -> str: ...


def sha256(data: bytes = b"") -> Sha256:
    return _constructor()(data)


@cache
def _constructor() -> Callable[[bytes], Sha256]:
    import importlib

    for name in ("_sha2", "_sha256"):
        try:
            constructor: Callable[[bytes], Sha256] = importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return constructor
    import hashlib

    return hashlib.sha256
