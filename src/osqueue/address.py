"""``host:port`` strings, as flags and configs spell them (``[v6]:port`` too), and
whether an address stays on this machine.

The server uses the loopback test to decide whether a listen address needs a
token, the remote client whether a token may go to an address without TLS;
configs parse their listen addresses here.
"""

from __future__ import annotations

import ipaddress

from osqueue.errors import InvalidInput

#: gRPC targets that never leave the machine (Unix domain sockets).
_LOCAL_SCHEMES = ("unix:", "unix-abstract:")


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


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs; any other host name counts as reachable."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable


def is_local_address(address: str) -> bool:
    """True when a connection to ``address`` (``host:port`` or a Unix socket) stays on
    this machine; an address that does not parse is not local."""
    if address.startswith(_LOCAL_SCHEMES):
        return True
    try:
        host, _ = split_host_port(address, "address")
    except InvalidInput:
        return False
    return is_loopback(host)
