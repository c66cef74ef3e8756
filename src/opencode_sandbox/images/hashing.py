"""The content hash that names a runner image and decides whether it must be rebuilt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.digest import sha256
from opencode_sandbox.images.certificates import CaCertificate
from opencode_sandbox.images.context import ContextFile

if TYPE_CHECKING:
    from opencode_sandbox.core.digest import Sha256

# Bumped whenever what goes into the hash changes, so older images are rebuilt once.
HASH_SCHEME = "1"
SHORT_HASH_LENGTH = 16


def _record(digest: Sha256, *fields: bytes) -> None:
    for value in fields:
        digest.update(len(value).to_bytes(8, "big"))
        digest.update(value)


def content_hash(
    *,
    dockerfile: str,
    context: Sequence[ContextFile],
    base_image_ids: Mapping[str, str],
    opencode_version: str | None,
    ca_certificates: Sequence[CaCertificate],
    packaged: Mapping[str, str] | None = None,
) -> str:
    """sha256 (64 hex) over everything that shapes the image; equal inputs, equal hash."""
    digest = sha256()
    _record(digest, b"scheme", HASH_SCHEME.encode())
    _record(digest, b"dockerfile", dockerfile.encode())
    for reference in sorted(base_image_ids):
        _record(digest, b"base", reference.encode(), base_image_ids[reference].encode())
    _record(digest, b"opencode", (opencode_version or "").encode())
    for certificate in sorted(ca_certificates, key=lambda item: item.pem):
        _record(digest, b"ca", certificate.pem)
    for item in sorted(context, key=lambda entry: entry.relative):
        kind = b"link" if item.link_target is not None else b"file"
        mode = b"x" if item.executable else b"-"
        _record(digest, kind, item.relative.encode(), mode, item.content())
    for name in sorted(packaged or {}):
        _record(digest, b"packaged", name.encode(), (packaged or {})[name].encode())
    return digest.hexdigest()


def short_hash(full_hash: str) -> str:
    return full_hash[:SHORT_HASH_LENGTH]
