"""Helpers shared by the remote-mode tests (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from osqueue.broker import BrokerConfig
from osqueue.client.remote import RemoteConfig
from osqueue.server.runner import BrokerServer
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage import from_url

#: Long enough that an idle broker never renews its lease during a test, so the
#: document's version moves only when an op commits.  No renewal wakes the idle
#: commit loop either: a parked claim or ``result()`` that misses its wake-up
#: waits out its whole wait, so a test's own timeout catches a lost wake-up (a
#: default lease would hide it behind the next renewal, a third of the lease on).
QUIET_LEASE_S = 3600.0


def quiet_broker_config(**overrides: float | int | str | None) -> BrokerConfig:
    values: dict[str, float | int | str | None] = {
        "lease_s": QUIET_LEASE_S,
        "heartbeat_timeout_s": 600.0,
    }
    values.update(overrides)
    return BrokerConfig(**values)  # type: ignore[arg-type]


def fast_config(**overrides: float | int | str | bool | None) -> RemoteConfig:
    """Client settings for tests: give up within seconds, not half a minute."""
    values: dict[str, float | int | str | bool | None] = {
        "timeout_s": 10.0,
        "rpc_timeout_s": 5.0,
        "backoff_base_s": 0.01,
        "backoff_cap_s": 0.1,
    }
    values.update(overrides)
    return RemoteConfig(**values)  # type: ignore[arg-type]


async def read_document(url: str) -> Document:
    storage = from_url(url)
    try:
        return decode((await storage.read(DOCUMENT_KEY)).data)
    finally:
        await storage.close()


class Parkings:
    """Counts the ``result()`` calls that reached ``server``'s waiters (each parks
    before it next yields, if its job has not finished)."""

    def __init__(self, server: BrokerServer) -> None:
        broker = server.broker
        assert broker is not None
        self.count = 0
        self._arrived = asyncio.Condition()
        waiters = broker._waiters
        original = waiters.finished

        async def watched(*args: Any, **kwargs: Any) -> Any:
            call = original(*args, **kwargs)
            async with self._arrived:
                self.count += 1
                self._arrived.notify_all()
            return await call

        waiters.finished = watched  # type: ignore[method-assign]

    async def wait(self, n: int) -> None:
        """Until ``n`` calls have reached the waiters."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: self.count >= n)


@dataclass(frozen=True)
class CertFiles:
    cert: str
    key: str
    #: An unrelated self-signed certificate, for "wrong CA" tests, and its key.
    other_cert: str
    other_key: str = ""


def cert_fingerprint(path: str) -> str:
    """The SHA-256 of a PEM certificate's DER bytes, as ``cryptography`` computes it."""
    with open(path, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    return cert.fingerprint(hashes.SHA256()).hex()


def non_loopback_ip() -> str:
    """An IPv4 address of this machine that is not loopback (where a test broker can listen).

    The interface that would route to a TEST-NET address (a UDP connect sends
    nothing), else any non-loopback address the host name resolves to.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            address = "127.0.0.1"
    if not ipaddress.ip_address(address).is_loopback:
        return address
    for *_, sockaddr in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        if not ipaddress.ip_address(sockaddr[0]).is_loopback:
            return str(sockaddr[0])
    raise RuntimeError("this machine has no non-loopback IPv4 address for the test broker")


def self_signed(common_name: str) -> tuple[bytes, bytes]:
    """A self-signed certificate (PEM) for localhost and 127.0.0.1, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


class FakeCalls:
    """A broker's :class:`~osqueue.broker.inproc.calls.BrokerCalls` for servicer tests.

    Every op raises (or answers) ``self.error`` when set; each op waits on
    ``gate`` (open by default) after counting itself in ``entered``, so a test
    can hold calls in flight and know when they got there.
    """

    def __init__(self) -> None:
        import asyncio

        from osqueue.api import Job

        self.error: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = 0
        self.arrived = asyncio.Condition()
        self.pushed: list[str] = []
        self.released: list[str] = []
        self.job = Job(id="job-1", queue="q", payload=b"p", attempts=1, max_attempts=5, token=9)
        self.claimable: list[Job] = [self.job]

    async def _enter(self) -> None:
        async with self.arrived:
            self.entered += 1
            self.arrived.notify_all()
        await self.gate.wait()
        if self.error is not None:
            raise self.error

    async def _each(self, items: Sequence[Any], answer: Any) -> list[Any]:
        """One answer per item: ``answer(item)``, or the error its entry raised."""
        import asyncio

        async def one(item: Any) -> Any:
            await self._enter()
            return answer(item)

        return await asyncio.gather(*(one(i) for i in items), return_exceptions=True)

    async def wait_entered(self, n: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: self.entered >= n)

    async def push_many(self, ops: Sequence[Any]) -> list[Any]:
        def pushed(op: Any) -> str:
            self.pushed.append(op.id)
            return str(op.id)

        return await self._each(ops, pushed)

    async def claim(self, op: Any, wait_s: float = 0.0) -> list[Any]:
        await self._enter()
        return list(self.claimable[: op.max_jobs])

    async def complete(self, jobs: Sequence[Any], results: Any = None) -> list[Any]:
        from osqueue.state import Ok

        return await self._each(jobs, lambda _: Ok())

    async def submit(self, ops: Sequence[Any]) -> list[Any]:
        from osqueue.state import Ok, Release

        def done(op: Any) -> Any:
            if isinstance(op, Release):
                self.released.append(op.job_id)
            return Ok()

        return await self._each(ops, done)

    async def cancel(self, op: Any) -> Any:
        from osqueue.state import Ok

        await self._enter()
        return Ok()

    def stats(self) -> Any:
        from osqueue.api import Stats

        if self.error is not None:
            raise self.error
        self.entered += 1
        return Stats(version=1)
