"""Prometheus metrics: what every osqueue process shares to expose its own.

The layout follows the cost of each part:

* :mod:`~osqueue.metrics.histogram`: the record kept on a hot path (a bucket
  count and a sum, no lock, no dependency).  The broker and the worker keep
  their own counters and these records; nothing on the path of an op touches
  prometheus_client.
* :mod:`~osqueue.metrics.exposition`: what turns those records into Prometheus
  families at scrape time, and the ``/metrics`` endpoint that serves a
  registry over HTTP on the process's event loop.  It needs prometheus_client
  (the ``osqueue[metrics]`` extra); importing it without raises
  :class:`~osqueue.errors.MissingExtra`.

Each process's collector lives beside what it reads: the broker's in
:mod:`osqueue.broker.observe.metrics`, the worker's beside the worker.  This package is
on the bottom floor of the layers so that an embedded broker (which sits below
the server) can serve its own endpoint.
"""

from osqueue.metrics.histogram import Histogram

#: Connections a ``/metrics`` endpoint answers at once by default (a scraper or
#: two, a curl); more are answered 503 and closed, so a flood holds few files.
MAX_CONNECTIONS = 16

__all__ = ["MAX_CONNECTIONS", "Histogram"]
