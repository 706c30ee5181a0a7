"""``osqueue.connect(url)``: the client for the queue at a storage URL.

The remote client (:class:`~osqueue.client.remote.RemoteClient`) finds the
broker through the queue document.  ``connect(url, embedded=True)`` starts a
broker in this process instead when no live broker holds the queue's lease,
and returns its in-process client (:mod:`osqueue.client.embedded`).  The
blocking twin is :func:`osqueue.client.sync.connect_sync`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import replace
from types import TracebackType
from typing import Any

from osqueue.client.embedded import EmbeddedClient, start_embedded
from osqueue.client.remote.client import RemoteClient
from osqueue.client.remote.config import RemoteConfig

AnyClient = RemoteClient | EmbeddedClient


class Connecting:
    """``await connect(...)`` gives the client; ``async with connect(...) as q`` closes it too."""

    def __init__(self, open_client: Callable[[], Awaitable[AnyClient]]) -> None:
        self._open_client = open_client
        self._client: AnyClient | None = None

    def __await__(self) -> Generator[Any, None, AnyClient]:
        return self._open_client().__await__()

    async def __aenter__(self) -> AnyClient:
        self._client = await self._open_client()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    url: str,
    *,
    token: str | None = None,
    tls_ca: str | None = None,
    embedded: bool = False,
    timeout_s: float | None = None,
    config: RemoteConfig | None = None,
    broker_config: Any = None,
) -> Connecting:
    """Connect to the broker of the queue at ``url`` (a storage URL).

    ``token``, ``tls_ca`` and ``timeout_s`` override the same fields of
    ``config``.  With ``embedded=True``, when no live broker holds the queue's
    lease, a broker is started in this process (configured by
    ``broker_config``, an :class:`osqueue.BrokerConfig`) and its in-process
    client is returned; closing the client stops that broker.
    """
    cfg = config or RemoteConfig()
    overrides: dict[str, Any] = {}
    if token is not None:
        overrides["token"] = token
    if tls_ca is not None:
        overrides["tls_ca"] = tls_ca
    if timeout_s is not None:
        overrides["timeout_s"] = timeout_s
    cfg = replace(cfg, **overrides) if overrides else cfg

    async def open_client() -> AnyClient:
        from osqueue.storage import from_url

        storage = from_url(url)
        try:
            if embedded:
                local = await start_embedded(storage, broker_config)
                if local is not None:
                    return local
            client = RemoteClient(storage, cfg, owns_storage=True)
            await client.connect_now()
            return client
        except BaseException:
            await storage.close()
            raise

    return Connecting(open_client)
