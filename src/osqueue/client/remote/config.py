"""How a remote client reaches and talks to the broker: :class:`RemoteConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.backoff import Backoff
from osqueue.errors import InvalidInput
from osqueue.state import validate
from osqueue.wire.auth import check_token
from osqueue.wire.tls import parse_fingerprints

MIB = 1024 * 1024

#: Failover waits are drawn from ``[d / 2, d]`` so clients that lost the same
#: broker do not all come back at once.
FAILOVER_JITTER = 0.5


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    """How a remote client reaches and talks to the broker.  Units are in the names."""

    #: Bearer token sent with every call.
    token: str | None = None
    #: PEM file of the CA that signed the broker's certificate (turns TLS on).
    tls_ca: str | None = None
    #: SHA-256 fingerprint(s) of the broker's certificate (hex, colons allowed;
    #: several separated by commas).  Turns TLS on; before any call, the
    #: certificate the broker presents is checked against it, and the channel
    #: then trusts that certificate alone (see :mod:`.trust`).
    tls_fingerprint: str | None = None
    #: TLS with the system's trusted roots (implied by ``tls_ca`` and ``tls_fingerprint``).
    tls: bool = False
    #: Host name to check the broker's certificate against, if not its address.
    tls_server_name: str | None = None
    #: Send the token to a broker at a non-loopback address without TLS (refused
    #: otherwise, with :class:`~osqueue.errors.UntrustedBroker`); warns once.
    allow_plaintext_token: bool = False
    #: Try this ``host:port`` first instead of reading the document.
    address: str | None = None
    #: How long one call keeps trying, failovers included, before it raises
    #: ``BrokerUnavailable`` (a claim's own wait is added on top).
    timeout_s: float = 30.0
    #: How long one attempt may take.
    rpc_timeout_s: float = 10.0
    #: While a call is open, ping the broker this often; no answer within as
    #: long fails the call over (a paused broker is left within 2x this).
    keepalive_s: float = 3.0
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 1.0
    #: Client-side batching: items and bytes per RPC, RPCs of one kind in flight.
    max_batch: int = 500
    max_batch_bytes: int = 4 * MIB
    max_in_flight_batches: int = 4
    #: Refused here, before sending (the broker's default limit).
    max_payload_bytes: int = 4 * MIB
    max_message_bytes: int = 16 * MIB
    #: Longer error texts are cut before ``fail`` sends them.
    max_error_chars: int = validate.MAX_ERROR_CHARS
    #: A claim asks for at most this many jobs (the broker's default batch limit).
    max_claim_jobs: int = 1000

    def __post_init__(self) -> None:
        for name in (
            "timeout_s",
            "rpc_timeout_s",
            "keepalive_s",
            "backoff_base_s",
            "backoff_cap_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise InvalidInput(f"must be a number of seconds > 0, got {value!r}", field=name)
        for name in (
            "max_batch",
            "max_batch_bytes",
            "max_in_flight_batches",
            "max_payload_bytes",
            "max_message_bytes",
            "max_error_chars",
            "max_claim_jobs",
        ):
            if getattr(self, name) < 1:
                raise InvalidInput("must be >= 1", field=name)
        if self.token is not None:
            check_token(self.token)
        if self.tls_fingerprint is not None:
            parse_fingerprints(self.tls_fingerprint)

    @property
    def uses_tls(self) -> bool:
        """True when the client speaks TLS to the broker."""
        return self.tls or self.tls_ca is not None or self.tls_fingerprint is not None

    @property
    def pins(self) -> frozenset[str]:
        """The pinned certificate fingerprints (empty: no pin)."""
        if self.tls_fingerprint is None:
            return frozenset()
        return parse_fingerprints(self.tls_fingerprint)

    @property
    def backoff(self) -> Backoff:
        """The wait between failover attempts (jittered; see :data:`FAILOVER_JITTER`)."""
        return Backoff(self.backoff_base_s, self.backoff_cap_s, jitter=FAILOVER_JITTER)
