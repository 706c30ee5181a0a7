"""A GCS XML-API shim: the few calls obstore makes, with real generation semantics.

Run it as ``python tests/servers/gcs_shim.py --port P [--bucket B]`` (or
through :class:`servers.GcsShimServer`).  No emulator on PyPI speaks
the XML API that obstore uses for ``gs://`` (the ``fake-gcs-server`` wrapper
refuses XML uploads), so this implements exactly what obstore 0.12 sends
(``object_store``'s ``gcp/client.rs``), following Google's XML API reference:

* ``PUT /bucket/object`` with an optional ``x-goog-if-generation-match``
  header: ``0`` means "only if absent", any other value "only if the live
  generation is this one"; otherwise ``412 PreconditionFailed``.  A missing
  object fails any non-zero precondition.  Every write gets a new generation,
  larger than every generation this server handed out before (so a deleted
  and re-created object never repeats one), answered in ``x-goog-generation``
  with the MD5 ``ETag``;
* ``GET``/``HEAD /bucket/object`` (optionally ``?generation=``), answering
  ``x-goog-generation``, ``ETag``, ``Last-Modified``; ``404 NoSuchKey``;
* ``DELETE /bucket/object`` (``204``; ``404 NoSuchKey``);
* ``GET /bucket?list-type=2&prefix=&delimiter=&start-after=&max-keys=
  &continuation-token=`` answering a ``ListBucketResult``;
* multipart uploads (``POST ?uploads``, ``PUT ?partNumber&uploadId``,
  ``POST ?uploadId``, ``DELETE ?uploadId``), for objects obstore uploads in
  parts.

Every request runs under one lock, so a conditional write is atomic as it is
on GCS.  Authentication is not checked (obstore sends an empty bearer token
when its service-account key says ``disable_oauth``).  What this does *not*
show: GCS's own behaviour.  The shim is our reading of Google's documented
``ifGenerationMatch`` semantics; the tests against it prove that obstore and
our adapter use those semantics correctly, not that GCS implements them.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

_NS = "http://doc.s3.amazonaws.com/2006-03-01"
_MAX_KEYS = 1000


@dataclass(frozen=True)
class _Object:
    data: bytes
    generation: int
    etag: str
    updated: float


@dataclass
class _State:
    bucket: str
    objects: dict[str, _Object]
    uploads: dict[str, dict[int, bytes]]
    generations: itertools.count[int]
    lock: threading.Lock

    def next_generation(self) -> int:
        return next(self.generations)


def _etag(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def _error(code: str, message: str) -> bytes:
    return (
        "<?xml version='1.0' encoding='UTF-8'?>"
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "osqueue-gcs-shim"
    state: _State  # set on the class by make_server

    def log_message(self, format: str, *args: object) -> None:
        return  # quiet: the tests read what they need from answers

    # -- plumbing -------------------------------------------------------------------

    def _target(self) -> tuple[str, str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        bucket, _, name = parts.path.lstrip("/").partition("/")
        return unquote(bucket), unquote(name), parse_qs(parts.query, keep_blank_values=True)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        fields = {"Content-Type": "application/xml", **(headers or {})}
        for name, value in fields.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _meta(self, obj: _Object) -> dict[str, str]:
        return {
            "Content-Type": "application/octet-stream",
            "ETag": obj.etag,
            "Last-Modified": formatdate(obj.updated, usegmt=True),
            "x-goog-generation": str(obj.generation),
            "x-goog-metageneration": "1",
            "x-goog-stored-content-length": str(len(obj.data)),
        }

    def _bucket_ok(self, bucket: str, head: bool = False) -> bool:
        if bucket == self.state.bucket:
            return True
        self._send(404, _error("NoSuchBucket", "The specified bucket does not exist."), head=head)
        return False

    # -- verbs ----------------------------------------------------------------------

    def do_PUT(self) -> None:
        bucket, name, query = self._target()
        body = self._body()
        if not self._bucket_ok(bucket):
            return
        if "uploadId" in query:
            self._put_part(query, body)
            return
        condition = self.headers.get("x-goog-if-generation-match")
        with self.state.lock:
            current = self.state.objects.get(name)
            if condition is not None and not _holds(condition, current):
                self._send(412, _error("PreconditionFailed", _PRECONDITION))
                return
            obj = _Object(body, self.state.next_generation(), _etag(body), time.time())
            self.state.objects[name] = obj
        self._send(200, b"", self._meta(obj))

    def do_GET(self) -> None:
        self._get(head=False)

    def do_HEAD(self) -> None:
        self._get(head=True)

    def _get(self, *, head: bool) -> None:
        bucket, name, query = self._target()
        if not self._bucket_ok(bucket, head):
            return
        if not name:
            self._list(query, head)
            return
        with self.state.lock:
            obj = self.state.objects.get(name)
        wanted = query.get("generation", [None])[0]
        if obj is None or (wanted is not None and wanted != str(obj.generation)):
            self._send(404, _error("NoSuchKey", "The specified key does not exist."), head=head)
            return
        self._send(200, obj.data, self._meta(obj), head=head)

    def do_DELETE(self) -> None:
        bucket, name, query = self._target()
        if not self._bucket_ok(bucket):
            return
        with self.state.lock:
            if "uploadId" in query:
                self.state.uploads.pop(query["uploadId"][0], None)
                found = True
            else:
                found = self.state.objects.pop(name, None) is not None
        if found:
            self._send(204)
        else:
            self._send(404, _error("NoSuchKey", "The specified key does not exist."))

    def do_POST(self) -> None:
        bucket, name, query = self._target()
        body = self._body()
        if not self._bucket_ok(bucket):
            return
        if "uploads" in query:
            upload = uuid.uuid4().hex
            with self.state.lock:
                self.state.uploads[upload] = {}
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                f'<InitiateMultipartUploadResult xmlns="{_NS}">'
                f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(name)}</Key>"
                f"<UploadId>{upload}</UploadId></InitiateMultipartUploadResult>"
            )
            self._send(200, xml.encode())
        elif "uploadId" in query:
            self._complete(bucket, name, query["uploadId"][0], body)
        else:
            self._send(400, _error("InvalidArgument", "unsupported POST"))

    # -- multipart ------------------------------------------------------------------

    def _put_part(self, query: dict[str, list[str]], body: bytes) -> None:
        upload, number = query["uploadId"][0], int(query["partNumber"][0])
        with self.state.lock:
            parts = self.state.uploads.get(upload)
            if parts is None:
                self._send(404, _error("NoSuchUpload", "The specified upload does not exist."))
                return
            parts[number] = body
        self._send(200, b"", {"ETag": _etag(body)})

    def _complete(self, bucket: str, name: str, upload: str, body: bytes) -> None:
        with self.state.lock:
            parts = self.state.uploads.pop(upload, None)
            if parts is None:
                self._send(404, _error("NoSuchUpload", "The specified upload does not exist."))
                return
            data = b"".join(parts[n] for n in sorted(parts))
            obj = _Object(data, self.state.next_generation(), _etag(data), time.time())
            self.state.objects[name] = obj
        xml = (
            f'<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult xmlns="{_NS}">'
            f"<Location>/{escape(bucket)}/{escape(name)}</Location><Bucket>{escape(bucket)}</Bucket>"
            f"<Key>{escape(name)}</Key><ETag>{escape(obj.etag)}</ETag>"
            "</CompleteMultipartUploadResult>"
        )
        self._send(200, xml.encode(), {"x-goog-generation": str(obj.generation)})

    # -- list -----------------------------------------------------------------------

    def _list(self, query: dict[str, list[str]], head: bool) -> None:
        def one(name: str) -> str:
            return query.get(name, [""])[0]

        prefix, delimiter = one("prefix"), one("delimiter")
        after = one("continuation-token") or one("start-after")
        limit = min(int(one("max-keys") or _MAX_KEYS), _MAX_KEYS)
        with self.state.lock:
            names = sorted(n for n in self.state.objects if n.startswith(prefix) and n > after)
            objects = {n: self.state.objects[n] for n in names}
        contents: list[str] = []
        prefixes: list[str] = []
        last = ""
        for name in names:
            if len(contents) + len(prefixes) >= limit:
                break
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if common not in prefixes:
                    prefixes.append(common)
            else:
                contents.append(_content(name, objects[name]))
            last = name
        truncated = bool(names) and last != names[-1]
        xml = (
            f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_NS}">'
            f"<Name>{escape(self.state.bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><MaxKeys>{limit}</MaxKeys>"
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
            + "".join(contents)
            + "".join(
                f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes
            )
            + (
                f"<NextContinuationToken>{escape(last)}</NextContinuationToken>"
                if truncated
                else ""
            )
            + "</ListBucketResult>"
        )
        self._send(200, xml.encode(), head=head)


_PRECONDITION = "At least one of the pre-conditions you specified did not hold."


def _holds(condition: str, current: _Object | None) -> bool:
    """Whether ``x-goog-if-generation-match: condition`` holds for ``current``."""
    if condition.strip() == "0":
        return current is None
    return current is not None and condition.strip() == str(current.generation)


def _content(name: str, obj: _Object) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(obj.updated))
    millis = int(obj.updated * 1000) % 1000
    return (
        f"<Contents><Key>{escape(name)}</Key><Generation>{obj.generation}</Generation>"
        f"<LastModified>{stamp}.{millis:03d}Z</LastModified><ETag>{escape(obj.etag)}</ETag>"
        f"<Size>{len(obj.data)}</Size></Contents>"
    )


def make_server(host: str, port: int, bucket: str) -> ThreadingHTTPServer:
    """A shim serving ``bucket`` on ``host:port`` (call ``serve_forever``)."""
    state = _State(
        bucket=bucket,
        objects={},
        uploads={},
        # GCS generations are microsecond timestamps; any strictly growing number will do
        generations=itertools.count(time.time_ns() // 1000),
        lock=threading.Lock(),
    )
    handler = type("GcsShimHandler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def _stop(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gcs_shim.py")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", default="osqueue-test")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    make_server(args.host, args.port, args.bucket).serve_forever()


if __name__ == "__main__":
    main()
