"""Whom the remote client trusts with its token: TLS, a pinned certificate, the plaintext rule.

The broker's address comes from the queue document, and whoever can write to
the bucket can write another address there.  So before a connection may carry
the token, :class:`Trust` decides how to open it (:meth:`Trust.credentials_for`):

* **Pinned** (``tls_fingerprint``): the client first fetches the certificate
  the address presents, in a bare TLS handshake with :mod:`ssl` (no call is
  made, no token sent), and compares its SHA-256 with the pins; a mismatch is
  :class:`~osqueue.errors.UntrustedBroker`.  The gRPC channel then trusts
  exactly that certificate as its root, so a later reconnect that meets
  another certificate at the address fails its TLS handshake.  With
  ``tls_ca`` as well, the fetched certificate must also chain to that CA.
* **TLS** (``tls_ca`` or ``tls``): gRPC checks the chain and the host name.
* **Plaintext**: allowed to a loopback address (or a Unix socket), and to any
  address when the client has no token.  A token for a non-loopback address
  is refused (:class:`~osqueue.errors.UntrustedBroker`, naming the address
  and the fix) unless ``allow_plaintext_token`` is set, which warns once.

gRPC's Python API does not show a client the server's certificate, hence the
separate handshake; the pin in the channel's root closes the gap between the
two connections.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Any

import grpc

from osqueue.address import is_local_address, split_host_port
from osqueue.client.remote.config import RemoteConfig
from osqueue.errors import BrokerUnavailable, InvalidInput, UntrustedBroker
from osqueue.wire.tls import fingerprint_of_der

log = logging.getLogger(__name__)


def read_ca(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path!r}: {exc}", field="tls_ca") from exc


def fetch_context(ca: bytes | None) -> ssl.SSLContext:
    """A client context that checks the chain against ``ca`` (if given), never the name
    (gRPC checks the host name on its own connection)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if ca is None:
        context.verify_mode = ssl.CERT_NONE
    else:
        try:
            context.load_verify_locations(cadata=ca.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise InvalidInput(f"holds no usable PEM certificate: {exc}", field="tls_ca") from exc
    context.set_alpn_protocols(["h2"])
    return context


async def fetch_certificate(
    address: str, context: ssl.SSLContext, *, server_name: str | None, timeout_s: float
) -> bytes:
    """The DER certificate the server at ``address`` presents in a TLS handshake.

    Only the handshake happens: nothing is sent after it, and the connection is
    dropped at once.  A chain that ``context`` rejects is
    :class:`~osqueue.errors.UntrustedBroker`; no answer, a refused connection or
    a server that does not speak TLS is :class:`~osqueue.errors.BrokerUnavailable`.
    """
    host, port = split_host_port(address, "address")
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=server_name or host
            )
    except ssl.SSLCertVerificationError as exc:
        raise UntrustedBroker(
            f"the certificate of the broker at {address} does not chain to tls_ca "
            f"({exc.verify_message}): refusing to send the token"
        ) from exc
    except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
        raise BrokerUnavailable(
            f"broker at {address}: cannot fetch its TLS certificate: {exc or type(exc).__name__}"
        ) from exc
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    finally:
        writer.transport.abort()  # no close_notify: the server may be writing already
    if not der:
        raise BrokerUnavailable(f"broker at {address} presented no TLS certificate")
    return bytes(der)


class Trust:
    """Decides, per broker address, how a channel opens and whether it may carry the token."""

    def __init__(self, config: RemoteConfig) -> None:
        self.config = config
        self._pins = config.pins
        ca = read_ca(config.tls_ca) if config.tls_ca is not None else None
        self._fetch_context = fetch_context(ca) if self._pins else None
        self._shared: Any = None  # grpc.ChannelCredentials for unpinned TLS
        if config.uses_tls and not self._pins:
            self._shared = grpc.ssl_channel_credentials(root_certificates=ca)
        self._warned_plaintext = False

    async def credentials_for(self, address: str) -> Any | None:
        """Channel credentials for ``address`` (None: plaintext), once it may have the token.

        Raises :class:`~osqueue.errors.UntrustedBroker` when it may not, and
        :class:`~osqueue.errors.BrokerUnavailable` when a pinned certificate
        could not be fetched (the caller looks again later).
        """
        if self._fetch_context is not None:
            return await self._pinned(address, self._fetch_context)
        if self._shared is not None:
            return self._shared
        self._check_plaintext(address)
        return None

    async def _pinned(self, address: str, context: ssl.SSLContext) -> Any:
        der = await fetch_certificate(
            address,
            context,
            server_name=self.config.tls_server_name,
            timeout_s=self.config.rpc_timeout_s,
        )
        seen = fingerprint_of_der(der)
        if seen not in self._pins:
            raise UntrustedBroker(
                f"the broker at {address} presented a certificate with SHA-256 fingerprint "
                f"{seen}, not the pinned tls_fingerprint ({', '.join(sorted(self._pins))}): "
                "refusing to send the token. If this address is unexpected, someone who can "
                "write to the bucket may have changed the broker address in the queue "
                "document; if the broker's certificate was replaced, pin the new fingerprint"
            )
        log.info(
            "the broker's certificate matches the pin",
            extra={"action": "pin_ok", "address": address, "fingerprint": seen},
        )
        return grpc.ssl_channel_credentials(
            root_certificates=ssl.DER_cert_to_PEM_cert(der).encode("ascii")
        )

    def _check_plaintext(self, address: str) -> None:
        if self.config.token is None or is_local_address(address):
            return
        if not self.config.allow_plaintext_token:
            raise UntrustedBroker(
                f"refusing to send the token in plaintext to the broker at {address} (not a "
                "loopback address): anyone on the network path could read it, and anyone who "
                "can write to the bucket can point the queue document at their own address. "
                "Give the broker a certificate (--tls-cert/--tls-key) and this client "
                "tls_ca or tls_fingerprint (--tls-ca, --tls-fingerprint), or accept the risk "
                "with allow_plaintext_token=True (--allow-plaintext-token, "
                "OSQUEUE_ALLOW_PLAINTEXT_TOKEN=1)"
            )
        if not self._warned_plaintext:
            self._warned_plaintext = True
            log.warning(
                "SENDING THE BEARER TOKEN IN PLAINTEXT to the broker at %s (not a loopback "
                "address; allowed by allow_plaintext_token): anyone on the network path can "
                "read it. Use TLS (tls_ca or tls_fingerprint)",
                address,
                extra={"action": "plaintext_token", "address": address},
            )
