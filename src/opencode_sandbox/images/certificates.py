"""CA certificates trusted in image builds and in the running sandbox."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import UsageError

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
CONTEXT_FOLDER = "ca-certificates"

_PEM_RE = rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----"


class CaCertificate(Record):
    file_name: str
    """Name inside the build context's `ca-certificates/` folder (ends in `.crt`)."""
    pem: bytes
    source: Path


def _certificates_in(path: Path, origin: str, data: bytes) -> list[CaCertificate]:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-.") or "certificate"
    found = []
    for block in re.findall(_PEM_RE, data):
        pem = block.replace(b"\r\n", b"\n") + b"\n"
        if not _is_der_sequence(pem):
            continue
        digest = sha256(pem).hexdigest()[:12]
        found.append(CaCertificate(f"{origin}-{stem}-{digest}.crt", pem, path))
    return found


def _is_der_sequence(pem: bytes) -> bool:
    """Whether the PEM body is one complete DER SEQUENCE, as every X.509 certificate is."""
    import base64
    import binascii

    body = b"".join(pem.strip().splitlines()[1:-1])
    try:
        der = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(der) < 2 or der[0] != 0x30:
        return False
    if der[1] < 0x80:
        return len(der) == 2 + der[1]
    width = der[1] & 0x7F
    if width == 0 or width > 4 or len(der) < 2 + width:
        return False
    return len(der) == 2 + width + int.from_bytes(der[2 : 2 + width], "big")


def host_certificates(host_dir: Path = HOST_CA_DIR) -> list[CaCertificate]:
    """The host's locally added CAs; files that are not PEM certificates are left out."""
    if not host_dir.is_dir():
        return []
    found: list[CaCertificate] = []
    for path in sorted(host_dir.rglob("*.crt")):
        try:
            found.extend(_certificates_in(path, "host", path.read_bytes()))
        except OSError:
            continue
    return found


def extra_certificate(path: Path) -> list[CaCertificate]:
    try:
        data = path.expanduser().read_bytes()
    except FileNotFoundError:
        raise UsageError(
            f"CA certificate not found: {path}",
            hint="Fix the path in extra-ca-certificates, or remove it.",
        ) from None
    except OSError as error:
        raise UsageError(
            f"cannot read CA certificate {path}: {error.strerror or error}",
            hint="Check the file's permissions, or remove it from extra-ca-certificates.",
        ) from None
    found = _certificates_in(path, "extra", data)
    if not found:
        raise UsageError(
            f"{path} holds no PEM certificate",
            hint="extra-ca-certificates takes PEM files (-----BEGIN CERTIFICATE-----).",
        )
    return found


def collect_ca_certificates(
    trust_host_ca: bool,
    extra_ca_certificates: Sequence[Path],
    host_dir: Path = HOST_CA_DIR,
) -> list[CaCertificate]:
    """One file per certificate, without duplicates, in a stable order."""
    collected = host_certificates(host_dir) if trust_host_ca else []
    for path in extra_ca_certificates:
        collected.extend(extra_certificate(path))
    unique: dict[bytes, CaCertificate] = {}
    for certificate in collected:
        unique.setdefault(certificate.pem, certificate)
    return sorted(unique.values(), key=lambda certificate: certificate.file_name)
