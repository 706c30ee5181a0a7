"""The gRPC service over the broker: servicer, auth, limits, and the server runner.

Names are imported on first use, so ``python -m osqueue.wire.codegen`` runs
even when the generated code is missing or stale.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osqueue.server.limits import Limits as Limits
    from osqueue.server.runner import BrokerServer as BrokerServer
    from osqueue.server.runner import run_broker as run_broker
    from osqueue.server.server import RunningServer as RunningServer
    from osqueue.server.server import ServerConfig as ServerConfig
    from osqueue.server.server import serve as serve
    from osqueue.server.service import QueueService as QueueService

_LAZY = {
    "BrokerServer": "osqueue.server.runner",
    "Limits": "osqueue.server.limits",
    "QueueService": "osqueue.server.service",
    "RunningServer": "osqueue.server.server",
    "ServerConfig": "osqueue.server.server",
    "run_broker": "osqueue.server.runner",
    "serve": "osqueue.server.server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'osqueue.server' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
