"""Watching a queue: the web dashboard (``osqueue dashboard``).

Everything here reads the queue document straight from storage (no broker is
needed to look) and the archive objects beside it; the few actions (retry or
purge dead jobs, cancel a job) go through the broker with the remote client.

What it reads and how (the snapshot, the status, job lists, the history, the
broker log, the archive) is the read side it shares with the ``osqueue``
command, in :mod:`osqueue.inspect`; this package presents it.

The web app (:mod:`~osqueue.dashboard.web`, :mod:`~osqueue.dashboard.security`,
:mod:`~osqueue.dashboard.actions`) needs the ``dashboard`` extra (aiohttp, Jinja2).
"""
