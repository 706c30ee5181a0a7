"""An HTTP/1.1 proxy that answers object-store requests the way a test scripts.

Put between an object-store client (obstore) and a loopback server (moto,
Azurite, the GCS shim), it forwards each request on a fresh upstream
connection and relays the answer, unless the next :class:`Fault` in
``script`` matches the request.  Then it does what the fault says:

* ``reply``: answer ``status``/``body`` itself; the server never sees the
  request (a 503 or a 409 that changed nothing);
* ``apply_then_reply``: forward the request (it applies), drop the server's
  answer and send ``status``/``body`` instead (a 5xx after the write landed);
* ``apply_then_hang``: forward the request, then never answer (the client
  times out; the write landed);
* ``apply_then_reset``: forward the request, then close the connection
  without an answer;
* ``reset``: close the connection before forwarding anything.

Every request and every answer the server gave are kept (``exchanges``), so
a test can assert what the client sent and what the server said.  Only the
standard library is used.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Action = Literal["reply", "apply_then_reply", "apply_then_hang", "apply_then_reset", "reset"]

_REASONS = {
    200: "OK",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class Fault:
    """What to do with the next request that ``matches`` (default: any ``PUT``)."""

    action: Action
    status: int = 503
    body: bytes = b""
    content_type: str = "application/xml"
    matches: Callable[[Request], bool] = field(default=lambda r: r.method == "PUT")


@dataclass
class Exchange:
    request: Request
    #: what the server answered (None if the request never reached it)
    response: Response | None
    #: the fault applied to this request, if any
    fault: Action | None


class FaultyHttpProxy:
    """Forward HTTP/1.1 to ``127.0.0.1:upstream_port``; apply ``script`` on the way."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.script: deque[Fault] = deque()
        self.exchanges: list[Exchange] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._hanging = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._clients: set[asyncio.StreamWriter] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening, end every connection (hanging ones too) and wait for them."""
        self._hanging.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._clients):
            writer.close()
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FaultyHttpProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _next_fault(self, request: Request) -> Fault | None:
        for fault in self.script:
            if fault.matches(request):
                self.script.remove(fault)
                return fault
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._clients.add(writer)
        try:
            while (request := await _read_request(reader)) is not None:
                if not await self._serve(request, writer):
                    break
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._clients.discard(writer)
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the client connection must be closed."""
        fault = self._next_fault(request)
        action = fault.action if fault is not None else None
        if action in ("reset", "reply"):
            self.exchanges.append(Exchange(request, None, action))
            if fault is not None and action == "reply":
                writer.write(_encode_response(fault.status, fault.body, fault.content_type))
                await writer.drain()
                return True
            return False
        response = await self._forward(request)
        self.exchanges.append(Exchange(request, response, action))
        if fault is None:
            writer.write(
                _encode_response(
                    response.status,
                    response.body,
                    None,
                    response.headers,
                    keep_length=request.method == "HEAD",
                )
            )
        elif action == "apply_then_reply":
            writer.write(_encode_response(fault.status, fault.body, fault.content_type))
        elif action == "apply_then_hang":
            await self._hanging.wait()
            return False
        else:  # apply_then_reset
            return False
        await writer.drain()
        return True

    async def _forward(self, request: Request) -> Response:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            headers = {k: v for k, v in request.headers.items() if k != "connection"}
            headers["connection"] = "close"
            head = f"{request.method} {request.target} HTTP/1.1\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in headers.items()
            )
            writer.write(head.encode("latin-1") + b"\r\n" + request.body)
            await writer.drain()
            return await _read_response(reader, request.method)
        finally:
            writer.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]] | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise
    lines = raw.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                # trailers end with an empty line
                while chunk != b"\r\n":
                    chunk = await reader.readuntil(b"\r\n")
                return b"".join(chunks)
            chunks.append(chunk[:-2])
    length = headers.get("content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    return b""


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    head = await _read_head(reader)
    if head is None:
        return None
    start, headers = head
    method, target, _ = start.split(" ", 2)
    body = await _read_body(reader, headers)
    headers.pop("transfer-encoding", None)
    headers["content-length"] = str(len(body))
    return Request(method, target, headers, body)


async def _read_response(reader: asyncio.StreamReader, method: str) -> Response:
    head = await _read_head(reader)
    if head is None:
        raise ConnectionError("the server closed the connection without an answer")
    start, headers = head
    status = int(start.split(" ", 2)[1])
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif "content-length" in headers or "transfer-encoding" in headers:
        body = await _read_body(reader, headers)
    else:
        body = await reader.read()  # until the server closes
    return Response(status, headers, body)


def _encode_response(
    status: int,
    body: bytes,
    content_type: str | None,
    headers: dict[str, str] | None = None,
    *,
    keep_length: bool = False,
) -> bytes:
    fields = dict(headers or {})
    for name in ("transfer-encoding", "connection"):
        fields.pop(name, None)
    if content_type is not None:
        fields["content-type"] = content_type
    if not keep_length:
        fields["content-length"] = str(len(body))
    reason = _REASONS.get(status, "Status")
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return head.encode("latin-1") + b"\r\n" + body
