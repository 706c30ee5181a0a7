"""Certificate fingerprints as both sides spell them.

A fingerprint is the SHA-256 of a certificate's DER bytes, written as 64
lowercase hex digits.  Input is forgiving: ``AB:CD:...`` (what ``openssl x509
-noout -fingerprint -sha256`` prints, after its ``sha256 Fingerprint=``),
upper case and a ``sha256:`` prefix are accepted, and several fingerprints
may be given separated by commas or spaces (a rollover: the old and the new
certificate).  The server logs its own; the remote client pins the broker's
(:class:`~osqueue.client.remote.RemoteConfig` ``tls_fingerprint``).
"""

from __future__ import annotations

import hashlib
import re
import ssl

from osqueue.errors import InvalidInput

_HEX64 = re.compile(r"[0-9a-f]{64}")
_PREFIXES = ("sha256:", "sha256=")
_OPENSSL_LABEL = re.compile(r"sha256\s+fingerprint=", re.IGNORECASE)


def fingerprint_of_der(der: bytes) -> str:
    """The SHA-256 fingerprint of a DER certificate (64 lowercase hex digits)."""
    return hashlib.sha256(der).hexdigest()


def fingerprint_of_pem(pem: bytes) -> str:
    """The fingerprint of the first certificate in a PEM file (a chain starts with its leaf)."""
    text = pem.decode("ascii", "replace")
    begin = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", begin)
    if begin < 0 or end < 0:
        raise InvalidInput("holds no PEM certificate", field="tls_cert")
    block = text[begin : end + len("-----END CERTIFICATE-----")]
    try:
        der = ssl.PEM_cert_to_DER_cert(block)
    except ValueError as exc:
        raise InvalidInput(f"is not a PEM certificate: {exc}", field="tls_cert") from exc
    return fingerprint_of_der(der)


def parse_fingerprints(text: str, field: str = "tls_fingerprint") -> frozenset[str]:
    """The SHA-256 fingerprints in ``text`` (one or more; see the module's doc)."""
    pins: set[str] = set()
    for item in re.split(r"[,\s]+", _OPENSSL_LABEL.sub("", text).strip()):
        if not item:
            continue
        value = item.lower()
        for prefix in _PREFIXES:
            value = value.removeprefix(prefix)
        value = value.replace(":", "")
        if not _HEX64.fullmatch(value):
            raise InvalidInput(
                f"{item!r} is not a SHA-256 fingerprint (64 hex digits, colons allowed)",
                field=field,
            )
        pins.add(value)
    if not pins:
        raise InvalidInput("names no fingerprint", field=field)
    return frozenset(pins)
