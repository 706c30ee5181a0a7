"""Scraping ``/metrics`` in tests: a raw HTTP/1.1 client (independent of the
endpoint's own code) and the samples parsed with prometheus_client's parser."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: (sample name, sorted labels) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def http_get(
    address: str, path: str = "/metrics", *, method: str = "GET", headers: str = ""
) -> Answer:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: test\r\n{headers}\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10.0)  # the server closes after answering
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return Answer(int(status_line.split(" ")[1]), fields, body)


def parse(body: bytes) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(address: str | None) -> Samples:
    assert address is not None
    answer = await http_get(address)
    assert answer.status == 200, answer
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(answer.body)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}
