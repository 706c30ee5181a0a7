"""The dashboard's listener: at most ``max_connections`` served at once, and the
settings that bound it (tests/integration/test_flood.py floods a real one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from osqueue.dashboard.board import DashboardConfig
from osqueue.dashboard.listener import BoundedSite
from osqueue.errors import InvalidInput
from osqueue.inspect.options import ClientOptions


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def capped() -> AsyncIterator[int]:
    """An app that answers ``ok``, served with room for two connections; its port."""
    app = web.Application()
    app.router.add_get("/", _ok)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = BoundedSite(runner, "127.0.0.1", 0, max_connections=2)
    await site.start()
    try:
        (address,) = runner.addresses
        yield int(address[1])
    finally:
        await runner.cleanup()


async def _get(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
    return reader, writer, head


async def test_past_the_cap_a_connection_is_answered_503_and_closed(capped: int) -> None:
    held = []
    for _ in range(2):  # answered, and kept open (keep-alive)
        reader, writer, head = await _get(capped)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert await reader.readexactly(2) == b"ok"
        held.append(writer)
    reader, writer = await asyncio.open_connection("127.0.0.1", capped)
    answer = await asyncio.wait_for(reader.read(), 10.0)  # to the end: closed by the server
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert answer.endswith(b"too many connections\n")
    for w in [*held, writer]:
        w.close()
        await w.wait_closed()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"max_connections": 0}, "max_connections"),
        ({"header_timeout_s": 0.0}, "header_timeout_s"),
        ({"header_timeout_s": float("nan")}, "header_timeout_s"),
    ],
)
def test_bad_listener_settings_are_refused_naming_the_field(
    kw: dict[str, float], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        DashboardConfig(ClientOptions("memory://listener"), **kw)  # type: ignore[arg-type]
    assert caught.value.field == field
