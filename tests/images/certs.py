"""Test CA certificates: DER-shaped fakes for hashing, real self-signed ones for builds."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest


def fake_pem(seed: str) -> bytes:
    """A PEM block holding a well-formed DER SEQUENCE; not a usable certificate."""
    payload = hashlib.sha512(seed.encode()).digest() * 4
    der = bytes([0x30, 0x82]) + len(payload).to_bytes(2, "big") + payload
    return b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(der) + b"-----END CERTIFICATE-----\n"


def real_pem(folder: Path, name: str) -> Path:
    """A freshly made self-signed CA certificate (needs the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test CA certificate")
    certificate = folder / f"{name}.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN=opencode-sandbox test {name}",
            "-keyout",
            str(folder / f"{name}.key"),
            "-out",
            str(certificate),
        ],
        capture_output=True,
        check=True,
    )
    return certificate
