"""Whom the tool's HTTPS requests trust: the system's CA store plus `extra-ca-certificates`.

A proxy that intercepts TLS is trusted where its CA is installed in the system store (as
`update-ca-certificates` does) or listed in `extra-ca-certificates`; certifi's bundle, which
HTTP libraries use by default, knows neither.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.errors import UsageError


def trusting_context(extra_ca_certificates: Sequence[Path] = ()) -> ssl.SSLContext:
    """A client context that verifies servers against the system store and the given PEM files."""
    import truststore

    from opencode_sandbox.images.certificates import extra_certificate

    context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for path in extra_ca_certificates:
        for certificate in extra_certificate(path):
            try:
                context.load_verify_locations(cadata=certificate.pem.decode("ascii"))
            except ssl.SSLError as error:
                raise UsageError(
                    f"{path} holds a certificate that cannot be used: {error.reason or error}",
                    hint="extra-ca-certificates takes PEM files of CA certificates; fix or remove it.",
                ) from None
    return context


def untrusted_certificate(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind `error` (an HTTP library's wrapper), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


UNTRUSTED_HINT = (
    "A proxy that intercepts HTTPS needs its CA trusted: install it in the system store "
    "(/usr/local/share/ca-certificates, then update-ca-certificates) or list its PEM file in "
    "extra-ca-certificates (config key, or OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES)."
)
