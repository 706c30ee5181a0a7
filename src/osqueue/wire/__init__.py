"""The wire format shared by the gRPC server and the remote client.

* ``_pb``: the generated message and stub modules (``python -m
  osqueue.wire.codegen`` writes them from ``proto/osqueue/v1/queue.proto``);
* :mod:`~osqueue.wire.convert`: API values (``Job``, ``NewJob``, ``Stats``) to
  and from their messages;
* :mod:`~osqueue.wire.status`: errors to and from ``Status`` and gRPC codes;
* :mod:`~osqueue.wire.auth`: how a bearer token travels in call metadata, and
  the access level each RPC needs;
* :mod:`~osqueue.wire.tls`: certificate fingerprints (what clients pin).

Neither side imports the other: both import this.
"""
