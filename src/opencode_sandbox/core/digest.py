"""SHA-256 for slugs, fingerprints and content hashes.

The interpreter's own implementation is used where it has one: importing hashlib loads
OpenSSL first, which costs more than a warm start can spare. The digests are the same.
"""

from __future__ import annotations

from typing import Protocol


class Sha256(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


def sha256(data: bytes = b"") -> Sha256:
    import importlib

    for name in ("_sha2", "_sha256"):
        try:
            constructor = importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        digest: Sha256 = constructor(data)
        return digest
    import hashlib

    return hashlib.sha256(data)
