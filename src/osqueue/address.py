"""``host:port`` strings, as flags and configs spell them (``[v6]:port`` too)."""

from __future__ import annotations

from osqueue.errors import InvalidInput


def split_host_port(address: str, field: str = "listen") -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port); bad input names ``field``."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise InvalidInput(f"{address!r} is not host:port", field=field)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def join_host_port(host: str, port: int) -> str:
    """(host, port) -> ``"host:port"``, bracketing an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
