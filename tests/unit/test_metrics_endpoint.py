"""The generic metrics pieces: the hot path's histogram and the ``/metrics`` endpoint."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from metrics_helpers import http_get, parse, value
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric

from osqueue.errors import InvalidInput, LeaseLost
from osqueue.metrics import Histogram
from osqueue.metrics.exposition import MetricsEndpoint, buckets_of, label_of, registry_of


class Fixed:
    """A collector with one gauge and one histogram; ``broken`` makes it raise."""

    def __init__(self) -> None:
        self.histogram = Histogram([0.1, 1.0])
        self.broken = False

    def collect(self) -> Iterator[Metric]:
        if self.broken:
            raise RuntimeError("a bug in a collector")
        yield GaugeMetricFamily("probe_value", "A value.", value=42)
        yield HistogramMetricFamily(
            "probe_seconds",
            "Times.",
            buckets=buckets_of(self.histogram),
            sum_value=self.histogram.sum,
        )


def test_a_histogram_counts_into_inclusive_buckets() -> None:
    h = Histogram([0.1, 1.0, 10.0])
    for v in (0.05, 0.1, 0.5, 1.0, 3.0, 100.0):
        h.observe(v)
    assert h.counts == [2, 2, 1, 1]  # le 0.1 holds 0.1 itself
    assert h.cumulative() == [(0.1, 2), (1.0, 4), (10.0, 5), (float("inf"), 6)]
    assert h.count == 6
    assert h.sum == pytest.approx(104.65)
    assert buckets_of(h) == [("0.1", 2.0), ("1.0", 4.0), ("10.0", 5.0), ("+Inf", 6.0)]


@pytest.mark.parametrize("bounds", [[], [1.0, 1.0], [2.0, 1.0]])
def test_histogram_bounds_must_increase(bounds: list[float]) -> None:
    with pytest.raises(InvalidInput) as caught:
        Histogram(bounds)
    assert caught.value.field == "bounds"


def test_a_class_becomes_a_label_value() -> None:
    assert label_of(LeaseLost) == "lease_lost"
    assert label_of(InvalidInput) == "invalid_input"
    assert label_of(Histogram) == "histogram"


async def test_the_endpoint_serves_the_registry_and_the_process() -> None:
    probe = Fixed()
    probe.histogram.observe(0.5)
    async with MetricsEndpoint(registry_of(probe), "127.0.0.1:0") as endpoint:
        assert endpoint.address is not None
        answer = await http_get(endpoint.address)
        assert answer.status == 200
        assert answer.headers["connection"] == "close"
        assert int(answer.headers["content-length"]) == len(answer.body)
        samples = parse(answer.body)
    assert value(samples, "probe_value") == 42
    assert value(samples, "probe_seconds_bucket", le="0.1") == 0
    assert value(samples, "probe_seconds_bucket", le="1.0") == 1
    assert value(samples, "probe_seconds_count") == 1
    assert any(name.startswith(("process_", "python_")) for name, _ in samples)
    assert endpoint.address is None


async def test_the_endpoint_answers_what_it_does_not_serve_clearly() -> None:
    probe = Fixed()
    async with MetricsEndpoint(registry_of(probe, process=False), "127.0.0.1:0") as endpoint:
        address = endpoint.address or ""
        assert (await http_get(address, "/")).status == 404
        assert (await http_get(address, "/metrics", method="POST")).status == 405
        assert (await http_get(address, "/metrics?name[]=probe_value")).status == 200
        head = await http_get(address, method="HEAD")
        assert head.status == 200
        assert head.body == b""
        assert int(head.headers["content-length"]) > 0
        huge = await http_get(address, headers="X-Pad: " + "a" * 20_000 + "\r\n")
        assert huge.status == 431
        # OpenMetrics, when the scraper asks for it
        om = await http_get(address, headers="Accept: application/openmetrics-text\r\n")
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert om.body.endswith(b"# EOF\n")
        # A collector's bug is a 500, and the endpoint goes on serving.
        probe.broken = True
        assert (await http_get(address)).status == 500
        probe.broken = False
        answer = await http_get(address)
        assert answer.status == 200
        assert not any(k[0].startswith("process_") for k in parse(answer.body))


async def test_garbage_is_a_bad_request() -> None:
    async with MetricsEndpoint(registry_of(Fixed(), process=False), "127.0.0.1:0") as endpoint:
        host, _, port = (endpoint.address or "").rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"hello\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5.0)
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 400 ")


async def test_closing_ends_requests_in_flight_and_leaves_no_task() -> None:
    endpoint = MetricsEndpoint(registry_of(Fixed(), process=False), "127.0.0.1:0")
    await endpoint.start()
    host, _, port = (endpoint.address or "").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /metrics HTTP/1.1\r\n")  # a head that never ends
    await writer.drain()
    await endpoint.close()
    # Closed by the server: an end of stream, or a reset if our bytes were still unread.
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), 5.0) == b""
    writer.close()
    with contextlib.suppress(ConnectionResetError):
        await writer.wait_closed()
    assert asyncio.all_tasks() == {asyncio.current_task()}
    await endpoint.close()  # twice is fine


def test_a_bad_listen_address_names_the_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        MetricsEndpoint(registry_of(process=False), "localhost")
    assert caught.value.field == "metrics_listen"
