"""Error answers our loopback servers never give, kept as samples with their provenance.

moto answers every lost compare-and-set with 412 (``PreconditionFailed``) and
an ``If-Match`` on a missing key with 404 (``NoSuchKey``); it never answers
409 ``ConditionalRequestConflict`` (moto 5.2: ``s3/responses.py`` raises only
``PreconditionFailed`` and ``MissingKey`` around conditional writes).  Neither
moto nor Azurite throttles.  The bodies below are replayed by
:class:`servers.http_faults.FaultyHttpProxy` in place of (or after) the
real server's answer, so obstore parses them exactly as it would parse the
cloud's.

Provenance: these are not captures from AWS or Azure (this project's tests
have no cloud access).  Each is the documented error code, HTTP status and
message, in the service's documented XML error shape:

* S3 409 ``ConditionalRequestConflict``: Amazon S3 API Reference, "Error
  responses", list of error codes; and the ``If-None-Match`` / ``If-Match``
  parameters of PutObject and CompleteMultipartUpload ("If a conflicting
  operation occurs during the upload S3 returns a 409
  ConditionalRequestConflict response ... you should retry").
* S3 503 ``SlowDown``: the same list ("Please reduce your request rate.").
* Azure 503 ``ServerBusy``: Azure Storage REST API, "Common REST API error
  codes".
* GCS 503: the XML API's error shape (``<Error><Code>``, ``<Message>``); the
  code and message are ours.  obstore decides by the status alone.
"""

from __future__ import annotations

S3_409_CONDITIONAL_REQUEST_CONFLICT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>ConditionalRequestConflict</Code>"
    b"<Message>A conflicting operation occurred. If using PutObject you can retry the "
    b"request. If using multipart upload you should initiate another CreateMultipartUpload "
    b"request and re-upload each part.</Message>"
    b"<RequestId>0000000000000000</RequestId><HostId>recorded-sample</HostId></Error>"
)

S3_503_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>0000000000000000</RequestId><HostId>recorded-sample</HostId></Error>"
)

AZURE_503_SERVER_BUSY = (
    b'<?xml version="1.0" encoding="utf-8"?>\n'
    b"<Error><Code>ServerBusy</Code><Message>The server is currently unable to receive "
    b"requests. Please retry your request.\nRequestId:00000000-0000-0000-0000-000000000000"
    b"\nTime:2026-11-24T00:00:00.0000000Z</Message></Error>"
)

GCS_503_UNAVAILABLE = (
    b"<?xml version='1.0' encoding='UTF-8'?>"
    b"<Error><Code>ServiceUnavailable</Code><Message>Service unavailable (recorded sample)."
    b"</Message></Error>"
)
