"""The remote client: a :class:`~osqueue.api.QueueClient` over gRPC that finds and
follows the broker through the queue document.

One module per concern:

* :mod:`.config`: :class:`RemoteConfig`, how the client reaches and talks to the broker;
* :mod:`.requests`: each call's arguments checked and turned into its message;
* :mod:`.trust`: whether an address may have the token, and how (TLS, the
  pinned certificate, plaintext to loopback only);
* :mod:`.connection`: the channel (TLS, keepalive), opened to the address
  discovery gives, dropped when the broker moves;
* :mod:`.failures`: what a failed attempt means (follow, rediscover, back off, raise);
* :mod:`.failover`: the retry loop with deadlines and backoff, on an injected clock;
* :mod:`.batches`: concurrent calls of one kind coalesced into one batch RPC;
* :mod:`.client`: :class:`RemoteClient`, the RPC surface that wires them.

``connect`` (:mod:`osqueue.client.connect`) opens a remote client, or an
embedded broker's client; the blocking twins are in :mod:`osqueue.client.sync`.
Both are importable from here too (``from osqueue.client.remote import
connect``), as they were when this package was one module; they load on first
use since they sit above this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from osqueue.client.remote.client import RemoteClient
from osqueue.client.remote.config import RemoteConfig

if TYPE_CHECKING:
    from osqueue.client.connect import AnyClient as AnyClient
    from osqueue.client.connect import Connecting as Connecting
    from osqueue.client.connect import connect as connect
    from osqueue.client.sync import connect_sync as connect_sync

_ABOVE = {
    "AnyClient": ("osqueue.client.connect", "AnyClient"),
    "Connecting": ("osqueue.client.connect", "Connecting"),
    "connect": ("osqueue.client.connect", "connect"),
    "connect_sync": ("osqueue.client.sync", "connect_sync"),
}


def __getattr__(name: str) -> Any:
    """``connect`` and the sync twin, imported from their modules on first use."""
    if name in _ABOVE:
        module, attr = _ABOVE[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnyClient",
    "Connecting",
    "RemoteClient",
    "RemoteConfig",
    "connect",
    "connect_sync",
]
