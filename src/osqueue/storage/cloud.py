"""``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix`` through obstore.

One adapter serves the three clouds; obstore (the optional ``cloud`` extra) is
imported only when such a URL is opened.  Compare-and-set maps to obstore's
put modes: ``mode="create"`` (``If-None-Match: *``) and
``mode={"e_tag": etag}`` (``If-Match``); S3 is opened with
``conditional_put="etag"``.  GCS conditions on the object *generation*, not the
ETag, so on ``gs://`` the token this store hands out as "etag" is the
generation (obstore's ``version``).

Configuration comes from the URL's query string, then from the usual
environment variables, which obstore reads itself (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY``,
``AZURE_STORAGE_USE_EMULATOR``, ``AZURITE_BLOB_STORAGE_URL``,
``GOOGLE_APPLICATION_CREDENTIALS``...).  An ``http://`` endpoint (or the Azure
emulator) turns on ``allow_http`` unless the URL says otherwise.

Query parameters:

* every scheme: ``allow_http``, ``allow_invalid_certificates``, ``proxy_url``,
  ``timeout_s`` (whole request, default 30), ``connect_timeout_s`` (default 5),
  ``max_retries`` (default 3) and ``retry_timeout_s`` (default 15).  obstore's
  own defaults (10 retries for up to 3 minutes) would stall a group commit far
  longer than the broker's own deadlines.
* ``s3``: ``endpoint``, ``region``, ``access_key_id``, ``secret_access_key``,
  ``session_token``, ``virtual_hosted_style_request``, ``skip_signature``,
  ``conditional_put`` (default ``etag``).
* ``gs``: ``endpoint`` (base URL), ``service_account``,
  ``service_account_key``, ``application_credentials``, ``skip_signature``.
* ``az``: ``account_name``, ``account_key``, ``sas_key``, ``token``,
  ``endpoint`` (e.g. ``http://127.0.0.1:10000/devstoreaccount1``),
  ``use_emulator``, ``client_id``, ``client_secret``, ``tenant_id``,
  ``use_azure_cli``, ``skip_signature``.

Errors: obstore's ``AlreadyExistsError`` and ``PreconditionError`` (and an S3
``409 ConditionalRequestConflict``) become ``Conflict``; a missing object is
``NotFound`` on reads and ``Conflict`` on a conditional write; a missing bucket
or container is a ``StorageError``.  A write that failed after it was sent
(timeout, reset connection, 5xx) is ``OutcomeUnknown``; a write that never
connected or was refused with a 4xx is a plain ``StorageError``.  Everything
else is ``StorageError`` with the obstore exception as ``cause``.

obstore retries some failed requests itself (up to ``max_retries``), so a
``Conflict`` on a conditional write can be the echo of this very write, which
landed before a retry: callers re-read and compare before treating a conflict
as lost (the broker does).

Async obstore calls run on a tokio runtime whose threads can still be dropping
Python objects just after a call returns; a process that exits at that instant
aborts.  The first call registers an ``atexit`` hook that waits out that
window (at most ``SETTLE_S`` after the last call).
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlencode

from osqueue.errors import (
    Conflict,
    InvalidInput,
    MissingExtra,
    NotFound,
    OutcomeUnknown,
    StorageError,
)
from osqueue.storage.keys import as_bytes, check_key, check_prefix
from osqueue.storage.port import Blob, Capabilities

if TYPE_CHECKING:
    from obstore.store import ClientConfig, ObjectStore, RetryConfig

Scheme = Literal["s3", "gs", "az"]
SCHEMES: tuple[Scheme, ...] = ("s3", "gs", "az")
TokenField = Literal["e_tag", "version"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Parameters never echoed back in ``Storage.url``.
SECRET_PARAMS = frozenset(
    {
        "secret_access_key",
        "session_token",
        "account_key",
        "sas_key",
        "token",
        "client_secret",
        "service_account_key",
    }
)


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidInput(f"must be true or false, not {text!r}", field=f"url.{name}")


def _parse_seconds(name: str, text: str) -> timedelta:
    try:
        seconds = float(text)
    except ValueError:
        raise InvalidInput(
            f"must be a number of seconds, not {text!r}", field=f"url.{name}"
        ) from None
    if not seconds > 0:
        raise InvalidInput(f"must be > 0, not {text!r}", field=f"url.{name}")
    return timedelta(seconds=seconds)


def _parse_count(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"must be an integer, not {text!r}", field=f"url.{name}") from None
    if value < 0:
        raise InvalidInput(f"must be >= 0, not {text!r}", field=f"url.{name}")
    return value


# Store config keys per scheme: query name -> (obstore config key, is_bool).
_STORE_PARAMS: dict[Scheme, dict[str, tuple[str, bool]]] = {
    "s3": {
        "endpoint": ("endpoint", False),
        "region": ("region", False),
        "access_key_id": ("access_key_id", False),
        "secret_access_key": ("secret_access_key", False),
        "session_token": ("session_token", False),
        "virtual_hosted_style_request": ("virtual_hosted_style_request", True),
        "skip_signature": ("skip_signature", True),
        "conditional_put": ("conditional_put", False),
    },
    "gs": {
        "endpoint": ("base_url", False),
        "service_account": ("service_account", False),
        "service_account_key": ("service_account_key", False),
        "application_credentials": ("application_credentials", False),
        "skip_signature": ("skip_signature", True),
    },
    "az": {
        "account_name": ("account_name", False),
        "account_key": ("account_key", False),
        "sas_key": ("sas_key", False),
        "token": ("token", False),
        "endpoint": ("endpoint", False),
        "use_emulator": ("use_emulator", True),
        "client_id": ("client_id", False),
        "client_secret": ("client_secret", False),
        "tenant_id": ("tenant_id", False),
        "use_azure_cli": ("use_azure_cli", True),
        "skip_signature": ("skip_signature", True),
    },
}
_CLIENT_PARAMS = frozenset(
    {"allow_http", "allow_invalid_certificates", "proxy_url", "timeout_s", "connect_timeout_s"}
)
_RETRY_PARAMS = frozenset({"max_retries", "retry_timeout_s"})

# Environment variables naming an endpoint, per scheme (first set wins).
_ENDPOINT_ENV: dict[Scheme, tuple[str, ...]] = {
    "s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "gs": ("GOOGLE_BASE_URL",),
    "az": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
}

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class CloudOptions:
    """The parsed query string of a cloud URL."""

    store: dict[str, str | bool]
    client: dict[str, str | bool | timedelta]
    retry: dict[str, int | timedelta]


def parse_options(scheme: Scheme, params: Mapping[str, str]) -> CloudOptions:
    """Split and type a cloud URL's query parameters; unknown names raise ``InvalidInput``."""
    known = _STORE_PARAMS[scheme]
    store: dict[str, str | bool] = {}
    client: dict[str, str | bool | timedelta] = {
        "timeout": timedelta(seconds=DEFAULT_TIMEOUT_S),
        "connect_timeout": timedelta(seconds=DEFAULT_CONNECT_TIMEOUT_S),
    }
    retry: dict[str, int | timedelta] = {
        "max_retries": DEFAULT_MAX_RETRIES,
        "retry_timeout": timedelta(seconds=DEFAULT_RETRY_TIMEOUT_S),
    }
    for name, text in params.items():
        if name in known:
            key, is_bool = known[name]
            store[key] = _parse_bool(name, text) if is_bool else text
        elif name in ("allow_http", "allow_invalid_certificates"):
            client[name] = _parse_bool(name, text)
        elif name == "proxy_url":
            client[name] = text
        elif name in ("timeout_s", "connect_timeout_s"):
            client[name.removesuffix("_s")] = _parse_seconds(name, text)
        elif name == "max_retries":
            retry[name] = _parse_count(name, text)
        elif name == "retry_timeout_s":
            retry["retry_timeout"] = _parse_seconds(name, text)
        else:
            allowed = sorted([*known, *_CLIENT_PARAMS, *_RETRY_PARAMS])
            raise InvalidInput(
                f"unknown parameter {name!r} for {scheme}:// (known: {', '.join(allowed)})",
                field=f"url.{name}",
            )
    if scheme == "s3":
        store.setdefault("conditional_put", "etag")
    if "allow_http" not in client and _plain_http(scheme, store):
        client["allow_http"] = True
    return CloudOptions(store, client, retry)


def _plain_http(scheme: Scheme, store: Mapping[str, str | bool]) -> bool:
    endpoint = store.get("base_url" if scheme == "gs" else "endpoint")
    if not isinstance(endpoint, str):
        endpoint = next((os.environ[v] for v in _ENDPOINT_ENV[scheme] if os.environ.get(v)), "")
    if endpoint.lower().startswith("http://"):
        return True
    if scheme == "az":
        emulator = store.get("use_emulator")
        if emulator is None:
            emulator = os.environ.get("AZURE_STORAGE_USE_EMULATOR", "").lower() in _TRUE
        return bool(emulator)
    return False


def _public_url(scheme: Scheme, bucket: str, prefix: str, params: Mapping[str, str]) -> str:
    url = f"{scheme}://{bucket}"
    if prefix:
        url += "/" + quote(prefix, safe="/")
    shown = {k: v for k, v in params.items() if k not in SECRET_PARAMS}
    if shown:
        url += "?" + urlencode(shown, quote_via=quote)
    return url


def open_cloud(scheme: Scheme, bucket: str, prefix: str, params: Mapping[str, str]) -> CloudStorage:
    """Open ``scheme://bucket/prefix`` configured by the URL's query ``params``."""
    if not bucket:
        raise InvalidInput(
            f"{scheme}:// URL needs a bucket: {scheme}://<bucket>/<prefix>", field="url"
        )
    options = parse_options(scheme, params)
    try:
        from obstore.store import AzureStore, GCSStore, S3Store
    except ImportError as exc:
        raise MissingExtra("cloud", "obstore") from exc
    prefix = prefix.strip("/")
    client: ClientConfig = options.client  # type: ignore[assignment]
    retry: RetryConfig = options.retry  # type: ignore[assignment]
    store_kwargs: dict[str, Any] = dict(options.store)
    factories: dict[Scheme, Callable[..., ObjectStore]] = {
        "s3": S3Store,
        "gs": GCSStore,
        "az": AzureStore,
    }
    try:
        store = factories[scheme](
            bucket,
            prefix=prefix or None,
            client_options=client,
            retry_config=retry,
            **store_kwargs,
        )
    except Exception as exc:
        raise InvalidInput(
            f"cannot open {scheme}://{bucket}: {_first_line(exc)}", field="url"
        ) from exc
    return CloudStorage(
        store,
        url=_public_url(scheme, bucket, prefix, params),
        capabilities=Capabilities(cross_process=True, content_etags=scheme == "s3", durable=True),
        token_field="version" if scheme == "gs" else "e_tag",
    )


# ---------------------------------------------------------------------- error mapping

# Matched against obstore's error text (its debug dump includes the HTTP status and body).
_STATUS = re.compile(r"Status \{\s*status: (\d{3})")
_MISSING_BUCKET = ("<Code>NoSuchBucket</Code>", "<Code>ContainerNotFound</Code>")


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _status(text: str) -> int | None:
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def translate(exc: Exception, *, op: str, key: str, url: str, mutating: bool) -> Exception:
    """Map an obstore exception to osqueue's hierarchy (the caller raises it ``from exc``)."""
    from obstore import exceptions as oe

    text = str(exc)
    where = f"{url}: {op} {key!r}"
    status = _status(text)
    if any(marker in text for marker in _MISSING_BUCKET):
        return StorageError(f"{where}: the bucket or container does not exist", cause=exc)
    if isinstance(exc, oe.AlreadyExistsError | oe.PreconditionError) or (
        mutating and status == 409
    ):
        return Conflict(f"{where}: precondition failed ({_first_line(exc, 120)})")
    if isinstance(exc, FileNotFoundError | oe.NotFoundError):
        if op == "write":
            return Conflict(f"{where}: the object does not exist")
        return NotFound(f"{where}: the object does not exist")
    if isinstance(exc, oe.PermissionDeniedError | oe.UnauthenticatedError):
        return StorageError(f"{where}: access denied ({_first_line(exc)})", cause=exc)
    if mutating and _maybe_applied(text, status):
        return OutcomeUnknown(f"{where}: no definite answer ({_first_line(exc)})", cause=exc)
    return StorageError(f"{where}: {_first_line(exc)}", cause=exc)


def _maybe_applied(text: str, status: int | None) -> bool:
    """Whether a failed write may still have landed (it reached the server)."""
    if "kind: Connect" in text:
        return False  # never connected: nothing was sent
    return not (status is not None and 400 <= status < 500)


# ---------------------------------------------------------------------- exit safety

#: How long after the last obstore call the interpreter may start finalizing.
SETTLE_S = 0.1
_last_call = 0.0
_settle_lock = threading.Lock()
_settle_registered = False


def _note_call() -> None:
    """Record an obstore call; the first one registers the exit hook."""
    global _last_call, _settle_registered
    _last_call = time.monotonic()
    if not _settle_registered:
        with _settle_lock:
            if not _settle_registered:
                atexit.register(_settle)
                _settle_registered = True


def _settle() -> None:
    """Give obstore's tokio threads a moment to drop their Python objects before exit.

    obstore runs async calls on a tokio runtime (pyo3-async-runtimes) whose
    threads release Python references just after a call completes.  If the
    interpreter is already finalizing at that instant the process aborts
    (SIGABRT; see PyO3/pyo3-async-runtimes#40).  Short-lived processes hit it
    about one run in four; waiting until ``SETTLE_S`` after the last call, from
    an ``atexit`` hook while Python is still whole, removes the window.
    """
    remaining = _last_call + SETTLE_S - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


# ---------------------------------------------------------------------- the store


class CloudStorage:
    """A :class:`~osqueue.storage.port.Storage` over an obstore ``ObjectStore``."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        url: str,
        capabilities: Capabilities,
        token_field: TokenField = "e_tag",
    ) -> None:
        self.store = store
        self._url = url
        self._capabilities = capabilities
        self._token_field: TokenField = token_field

    @property
    def url(self) -> str:
        return self._url

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def _error(self, exc: Exception, op: str, key: str, *, mutating: bool = False) -> Exception:
        return translate(exc, op=op, key=key, url=self._url, mutating=mutating)

    def _token(self, meta: Mapping[str, Any], op: str, key: str) -> str:
        token = meta.get(self._token_field)
        if not token:
            raise StorageError(
                f"{self._url}: {op} {key!r}: the store returned no {self._token_field}"
            )
        return str(token)

    async def read(self, key: str) -> Blob:
        import obstore

        check_key(key)
        try:
            result = await obstore.get_async(self.store, key)
            data = bytes(await result.bytes_async())
        except Exception as exc:
            raise self._error(exc, "read", key) from exc
        finally:
            _note_call()
        return Blob(data, self._token(result.meta, "read", key))

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        import obstore

        check_key(key)
        payload = as_bytes(data)
        try:
            if if_match is None:
                result = await obstore.put_async(self.store, key, payload, mode="create")
            elif self._token_field == "version":
                result = await obstore.put_async(
                    self.store, key, payload, mode={"version": if_match}
                )
            else:
                result = await obstore.put_async(self.store, key, payload, mode={"e_tag": if_match})
        except Exception as exc:
            raise self._error(exc, "write", key, mutating=True) from exc
        finally:
            _note_call()
        return self._token(result, "write", key)

    async def put(self, key: str, data: bytes) -> None:
        import obstore

        check_key(key)
        payload = as_bytes(data)
        try:
            await obstore.put_async(self.store, key, payload)
        except Exception as exc:
            raise self._error(exc, "put", key, mutating=True) from exc
        finally:
            _note_call()

    async def get(self, key: str) -> bytes:
        return (await self.read(key)).data

    async def delete(self, key: str) -> None:
        import obstore

        check_key(key)
        try:
            await obstore.delete_async(self.store, key)
        except FileNotFoundError:
            return
        except Exception as exc:
            error = self._error(exc, "delete", key, mutating=True)
            if isinstance(error, NotFound):
                return
            raise error from exc
        finally:
            _note_call()

    async def list(self, prefix: str = "") -> list[str]:
        import obstore

        check_prefix(prefix)
        # obstore matches whole path segments; we promise plain string prefixes,
        # so list the enclosing folder and filter.
        folder = prefix.rpartition("/")[0]
        keys: list[str] = []
        try:
            async for chunk in obstore.list(self.store, folder or None, chunk_size=1000):
                keys.extend(m["path"] for m in chunk if m["path"].startswith(prefix))
        except Exception as exc:
            raise self._error(exc, "list", prefix) from exc
        finally:
            _note_call()
        keys.sort()
        return keys

    async def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"CloudStorage({self._url!r})"
