"""Real object-store servers on loopback, for tests and demos.

``MotoS3Server`` runs moto's S3 API (single-threaded, see
:mod:`servers.moto_server`), ``AzuriteServer`` runs Microsoft's
Azure Blob emulator, and ``GcsShimServer`` runs the GCS XML-API shim of
:mod:`servers.gcs_shim` (no emulator speaks the XML API obstore
uses).  Each starts its server as a subprocess on a free ``127.0.0.1``
port, polls it until it answers (with a deadline), creates a bucket or
container, and gives a ready storage URL::

    with MotoS3Server() as s3:
        store = from_url(s3.url("queue-a"))   # s3://osqueue-test/queue-a?endpoint=...
        os.environ.update(s3.env)             # or configure through the environment

Both are context managers; ``stop()`` terminates the subprocess and removes
its files.  Only the standard library is used (no boto3, no Azure SDK).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from email.utils import formatdate
from pathlib import Path
from types import TracebackType
from typing import IO, Self
from urllib.parse import quote, urlencode
from xml.etree import ElementTree

#: Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"
MOTO_REGION = "us-east-1"
#: the servers' own scripts (moto_server.py, gcs_shim.py) are run by path
_HERE = Path(__file__).resolve().parent


class ServerError(RuntimeError):
    """A test server could not be started or configured."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    *,
    body: bytes = b"",
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class _ServerProcess:
    """Start a server subprocess on a free port and wait until it answers HTTP."""

    name = "server"
    startup_attempts = 3

    def __init__(self, *, startup_timeout_s: float = 60.0) -> None:
        self.startup_timeout_s = startup_timeout_s
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._workdir = ""

    # subclasses ------------------------------------------------------------------

    def _command(self, port: int) -> list[str]:
        raise NotImplementedError

    def _probe_path(self) -> str:
        return "/"

    def _provision(self) -> None:
        """Create the bucket or container once the server answers."""

    # lifecycle ---------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        if self.running:
            return self
        self._workdir = tempfile.mkdtemp(prefix=f"osqueue-{self.name}-")
        last = ""
        for _ in range(self.startup_attempts):
            self.port = free_port()
            self._spawn()
            try:
                self._wait_ready()
            except ServerError as exc:  # port taken by someone else, or a slow start
                last = str(exc)
                self._terminate()
                continue
            self._provision()
            return self
        self.stop()
        raise ServerError(last)

    def _spawn(self) -> None:
        log_path = os.path.join(self._workdir, f"{self.name}.log")
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in _terminate)
        self._proc = subprocess.Popen(
            self._command(self.port),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self._workdir,
            start_new_session=True,
        )

    def _log_tail(self) -> str:
        path = os.path.join(self._workdir, f"{self.name}.log")
        try:
            return Path(path).read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ServerError(
                    f"{self.name} exited with code {self._proc.returncode} "
                    f"on port {self.port}:\n{self._log_tail()}"
                )
            try:
                _request(self.port, "GET", self._probe_path())
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{self.name} did not answer on port {self.port} within "
                    f"{self.startup_timeout_s:.0f} s:\n{self._log_tail()}"
                )
            time.sleep(0.05)  # poll interval, bounded by the deadline above

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Stop the server and delete its files."""
        self._terminate()
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class MotoS3Server(_ServerProcess):
    """moto's S3 API on loopback, single-threaded so conditional writes are atomic."""

    name = "moto"

    def __init__(self, bucket: str = "osqueue-test", *, startup_timeout_s: float = 60.0) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s)
        self.bucket = bucket

    def _command(self, port: int) -> list[str]:
        return [sys.executable, str(_HERE / "moto_server.py"), "--port", str(port)]

    def _provision(self) -> None:
        self.create_bucket(self.bucket)

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket (moto ignores the signature but needs the header to route to S3)."""
        status, body = _request(self.port, "PUT", f"/{quote(bucket)}", self._auth())
        if status not in (200, 409):
            raise ServerError(f"moto: creating bucket {bucket!r} failed: {status} {body[:300]!r}")

    def _auth(self) -> dict[str, str]:
        date = time.strftime("%Y%m%d", time.gmtime())
        return {
            "Authorization": (
                f"AWS4-HMAC-SHA256 Credential={MOTO_ACCESS_KEY}/{date}/{MOTO_REGION}/s3/"
                "aws4_request, SignedHeaders=host, Signature=0"
            )
        }

    def enable_versioning(self, bucket: str) -> None:
        """Keep every version of every object in ``bucket`` (S3 bucket versioning)."""
        body = (
            b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Status>Enabled</Status></VersioningConfiguration>"
        )
        status, answer = _request(
            self.port, "PUT", f"/{quote(bucket)}?versioning", self._auth(), body=body
        )
        if status != 200:
            raise ServerError(f"moto: versioning {bucket!r} failed: {status} {answer[:300]!r}")

    def object_versions(self, bucket: str, key: str) -> list[tuple[str, str]]:
        """Every stored version of ``key`` in a versioned bucket as (version id, ETag),
        oldest first.  moto's ETag is the MD5 of the bytes (quotes removed here)."""
        found: list[tuple[str, str]] = []
        marker: dict[str, str] = {}
        while True:
            query = urlencode({"versions": "", "prefix": key, **marker})
            status, body = _request(self.port, "GET", f"/{quote(bucket)}?{query}", self._auth())
            if status != 200:
                raise ServerError(f"moto: listing versions failed: {status} {body[:300]!r}")
            root = ElementTree.fromstring(body)
            ns = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
            for version in root.iter(f"{ns}Version"):
                if version.findtext(f"{ns}Key") == key:
                    version_id = version.findtext(f"{ns}VersionId") or ""
                    found.append((version_id, (version.findtext(f"{ns}ETag") or "").strip('"')))
            if root.findtext(f"{ns}IsTruncated") != "true":
                break
            marker = {
                "key-marker": root.findtext(f"{ns}NextKeyMarker") or "",
                "version-id-marker": root.findtext(f"{ns}NextVersionIdMarker") or "",
            }
        found.reverse()  # S3 lists the newest first
        return found

    def url(self, prefix: str = "", **params: str) -> str:
        """An ``s3://`` URL for ``prefix`` in the bucket, endpoint and keys in the query."""
        query = {
            "endpoint": self.endpoint,
            "region": MOTO_REGION,
            "access_key_id": MOTO_ACCESS_KEY,
            "secret_access_key": MOTO_SECRET_KEY,
            "allow_http": "true",
            **params,
        }
        path = f"/{quote(prefix.strip('/'))}" if prefix.strip("/") else ""
        return f"s3://{self.bucket}{path}?{urlencode(query, quote_via=quote)}"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point S3 clients (obstore, boto3) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": MOTO_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": MOTO_SECRET_KEY,
            "AWS_REGION": MOTO_REGION,
            "AWS_DEFAULT_REGION": MOTO_REGION,
            "AWS_ALLOW_HTTP": "true",
        }


#: A service-account key that makes obstore skip OAuth (an empty bearer token).
GCS_SHIM_KEY = json.dumps(
    {
        "private_key": "unused",
        "private_key_id": "osqueue-gcs-shim",
        "client_email": "shim@osqueue.invalid",
        "disable_oauth": True,
    }
)


class GcsShimServer(_ServerProcess):
    """The GCS XML-API shim on loopback, serving one bucket."""

    name = "gcs-shim"

    def __init__(self, bucket: str = "osqueue-test", *, startup_timeout_s: float = 60.0) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s)
        self.bucket = bucket

    def _command(self, port: int) -> list[str]:
        return [
            sys.executable,
            str(_HERE / "gcs_shim.py"),
            "--port",
            str(port),
            "--bucket",
            self.bucket,
        ]

    def url(self, prefix: str = "", **params: str) -> str:
        """A ``gs://`` URL for ``prefix`` in the bucket, endpoint and key in the query."""
        query = {"endpoint": self.endpoint, "service_account_key": GCS_SHIM_KEY, **params}
        path = f"/{quote(prefix.strip('/'))}" if prefix.strip("/") else ""
        return f"gs://{self.bucket}{path}?{urlencode(query, quote_via=quote)}"


def azurite_binary() -> Path:
    """Find ``azurite-blob``: ``$OSQUEUE_AZURITE``, the venv's ``node`` prefix, or ``PATH``."""
    override = os.environ.get("OSQUEUE_AZURITE")
    candidates = [Path(override)] if override else []
    candidates.append(Path(sys.prefix) / "node" / "node_modules" / ".bin" / "azurite-blob")
    found = shutil.which("azurite-blob")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ServerError(
        "azurite-blob is not installed (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); run `make setup`, which installs it with npm into .venv/node"
    )


def _shared_key(method: str, headers: dict[str, str], resource: str) -> str:
    """Azure Storage SharedKey signature for a body-less request."""
    canonical_headers = "".join(
        f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-")
    )
    # VERB, then 11 standard headers (all empty here), then x-ms-* headers and the resource.
    to_sign = method + "\n" * 12 + canonical_headers + resource
    key = base64.b64decode(AZURITE_KEY)
    digest = hmac.new(key, to_sign.encode(), hashlib.sha256).digest()
    return f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(digest).decode()}"


class AzuriteServer(_ServerProcess):
    """Azurite's Blob service on loopback with the well-known dev account."""

    name = "azurite"

    def __init__(self, container: str = "osqueue-test", *, startup_timeout_s: float = 60.0) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s)
        self.container = container
        self.binary = azurite_binary()

    def _command(self, port: int) -> list[str]:
        return [
            str(self.binary),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            os.path.join(self._workdir, "data"),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
        ]

    def _probe_path(self) -> str:
        return f"/{AZURITE_ACCOUNT}?comp=list"

    def _provision(self) -> None:
        self.create_container(self.container)

    def create_container(self, container: str) -> None:
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container"
        headers["Authorization"] = _shared_key("PUT", headers, resource)
        path = f"/{AZURITE_ACCOUNT}/{quote(container)}?restype=container"
        status, body = _request(self.port, "PUT", path, headers)
        if status not in (201, 409):
            raise ServerError(
                f"azurite: creating container {container!r} failed: {status} {body[:300]!r}"
            )

    @property
    def blob_endpoint(self) -> str:
        return f"{self.endpoint}/{AZURITE_ACCOUNT}"

    def url(self, prefix: str = "", **params: str) -> str:
        """An ``az://`` URL for ``prefix`` in the container, account and endpoint in the query."""
        query = {
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "endpoint": self.blob_endpoint,
            "allow_http": "true",
            **params,
        }
        path = f"/{quote(prefix.strip('/'))}" if prefix.strip("/") else ""
        return f"az://{self.container}{path}?{urlencode(query, quote_via=quote)}"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for obstore's Azure emulator mode."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": self.endpoint,
        }
