"""The write options that carry the broker's TLS identity and the plaintext opt-in."""

from __future__ import annotations

import pytest

from osqueue.errors import InvalidInput
from osqueue.spark.options import WriteOptions

FP = "ab" * 32


def test_tls_options_are_parsed_and_checked_at_planning() -> None:
    options = WriteOptions.parse(
        {
            "url": "file:///q",
            "token": "t0ken",
            "tls_ca": "/etc/osqueue/ca.pem",
            "tls_fingerprint": FP,
            "allow_plaintext_token": "true",
        }
    )
    assert (options.tls_ca, options.tls_fingerprint) == ("/etc/osqueue/ca.pem", FP)
    assert options.allow_plaintext_token
    plain = WriteOptions.parse({"url": "file:///q"})
    assert (plain.tls_ca, plain.tls_fingerprint, plain.allow_plaintext_token) == (
        None,
        None,
        False,
    )
    with pytest.raises(InvalidInput) as caught:
        WriteOptions.parse({"url": "file:///q", "tls_fingerprint": "12:34"})
    assert caught.value.field == "tls_fingerprint"
