"""Watching a queue: the web dashboard (``osqueue dashboard``) and what it shares with
``osqueue top``.

Everything here reads the queue document straight from storage (no broker is
needed to look) and the archive objects beside it; the few actions (retry or
purge dead jobs, cancel a job) go through the broker with the remote client.

Modules that ``osqueue top`` uses import nothing of the web stack:

* :mod:`~osqueue.dashboard.snapshot`: the decoded document, cached by ETag, and
  the counts a page shows (``osqueue status``'s own summary);
* :mod:`~osqueue.dashboard.history`: the last hour of depth and throughput, behind
  a small provider interface;
* :mod:`~osqueue.dashboard.brokerlog`: the broker as observed (epochs, failovers,
  commit rate) and the hook where broker metrics plug in;
* :mod:`~osqueue.dashboard.queries`: job lists (filters, keyset pages), job detail,
  payload previews;
* :mod:`~osqueue.dashboard.archive_view`: the archive by day and hour, and finding a
  job in it.

The web app (:mod:`~osqueue.dashboard.web`, :mod:`~osqueue.dashboard.security`,
:mod:`~osqueue.dashboard.actions`) needs the ``dashboard`` extra (aiohttp, Jinja2).
"""
