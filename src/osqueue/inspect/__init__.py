"""The read side: what the ``osqueue`` command and the web dashboard both look at.

One floor below ``cli`` and ``dashboard`` (which present it) and above the
clients, the broker, the state layer and storage (which it reads through).
Nothing here prints or serves a page:

* :mod:`~osqueue.inspect.document`: the queue document's bytes, read straight from
  storage (no broker needed);
* :mod:`~osqueue.inspect.snapshot`: the decoded document, cached by ETag, and the
  holders, workers and schedules a page shows;
* :mod:`~osqueue.inspect.status`: the queue at a glance (``osqueue status --json``)
  and how every view tells an age;
* :mod:`~osqueue.inspect.jobs`: job lists in claim order (the document and the
  segments of a deep backlog, through :mod:`osqueue.broker.cold.read`), one
  job as JSON, its times, payload previews;
* :mod:`~osqueue.inspect.history`: the last hour of depth and throughput;
* :mod:`~osqueue.inspect.brokerlog`: the broker as observed (epochs, commit rate);
* :mod:`~osqueue.inspect.archive`: the archive's objects by day and hour, read back;
* :mod:`~osqueue.inspect.options`: how a command or the dashboard reaches the
  broker (:class:`~osqueue.inspect.options.ClientOptions`, ``open_client``);
* :mod:`~osqueue.inspect.admin`: the few changes both make through the broker
  (dead letters, pausing a schedule).
"""
