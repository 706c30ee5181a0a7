"""Open a store by URL: ``from_url("s3://bucket/jobs?region=eu-west-1")``.

=====================================  ==================================================
``memory://name[?etag=md5]``           in-process store shared by name (:mod:`.memory`)
``file:///abs/dir[?fsync=false]``      local directory, safe across processes (:mod:`.file`)
``s3://bucket/prefix?...``             S3 and S3-compatible stores (:mod:`.cloud`)
``gs://bucket/prefix?...``             Google Cloud Storage (:mod:`.cloud`)
``az://container/prefix?...``          Azure Blob Storage (:mod:`.cloud`)
``latency+<url>?write_ms=..``          any of the above with delays and faults (:mod:`.faults`)
=====================================  ==================================================

Every problem is an ``InvalidInput`` whose ``field`` names the part of the URL
at fault (``url``, ``url.scheme``, ``url.path``, ``url.<parameter>``).
"""

from __future__ import annotations

from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from osqueue.errors import InvalidInput
from osqueue.storage.cloud import SCHEMES, open_cloud
from osqueue.storage.faults import FaultConfig, FaultyStorage
from osqueue.storage.file import FileStorage
from osqueue.storage.memory import ETAG_MODES, MemoryStorage
from osqueue.storage.port import Storage

LATENCY_PREFIX = "latency+"
KNOWN = ("memory", "file", *SCHEMES)


def _params(parts: SplitResult, url: str) -> dict[str, str]:
    params: dict[str, str] = {}
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidInput(f"malformed query string in {url!r}: {exc}", field="url.query") from None
    for name, value in pairs:
        if name in params:
            raise InvalidInput(f"given twice in {url!r}", field=f"url.{name}")
        params[name] = value
    return params


def _reject_unknown(params: dict[str, str], allowed: tuple[str, ...], scheme: str) -> None:
    for name in params:
        if name not in allowed:
            known = ", ".join(allowed) or "none"
            raise InvalidInput(
                f"unknown parameter {name!r} for {scheme}:// (known: {known})", field=f"url.{name}"
            )


def _open_memory(parts: SplitResult, params: dict[str, str]) -> MemoryStorage:
    _reject_unknown(params, ("etag",), "memory")
    etag = params.get("etag", "counter")
    if etag == "counter":
        return MemoryStorage(unquote(parts.netloc + parts.path), etag="counter")
    if etag == "md5":
        return MemoryStorage(unquote(parts.netloc + parts.path), etag="md5")
    raise InvalidInput(f"must be one of {', '.join(ETAG_MODES)}, not {etag!r}", field="url.etag")


def _open_file(parts: SplitResult, params: dict[str, str], url: str) -> FileStorage:
    _reject_unknown(params, ("fsync",), "file")
    if parts.netloc not in ("", "localhost"):
        raise InvalidInput(
            f"{url!r} names host {parts.netloc!r}; use file:///absolute/dir (three slashes)",
            field="url.host",
        )
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise InvalidInput(f"{url!r} needs an absolute path: file:///abs/dir", field="url.path")
    if "\x00" in path:
        raise InvalidInput(f"{url!r} contains NUL", field="url.path")
    fsync = params.get("fsync", "true").lower()
    if fsync not in ("true", "false", "1", "0"):
        raise InvalidInput(f"must be true or false, not {fsync!r}", field="url.fsync")
    return FileStorage(path, fsync=fsync in ("true", "1"))


def _open_latency(url: str) -> FaultyStorage:
    inner_url = url[len(LATENCY_PREFIX) :]
    base, _, query = inner_url.partition("?")
    owned = FaultConfig.parameter_names()
    wrapper: dict[str, str] = {}
    kept: list[str] = []
    for piece in query.split("&") if query else []:
        pairs = parse_qsl(piece, keep_blank_values=True)
        name = pairs[0][0] if pairs else piece
        if name in owned:
            if name in wrapper:
                raise InvalidInput(f"given twice in {url!r}", field=f"url.{name}")
            wrapper[name] = pairs[0][1]
        else:
            kept.append(piece)
    config, seed = FaultConfig.from_params(wrapper)
    inner = from_url(base + ("?" + "&".join(kept) if kept else ""))
    return FaultyStorage(inner, config, seed=seed)


def from_url(url: str) -> Storage:
    """Open the store a URL names; see the module docstring for the schemes."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("must be a non-empty storage URL such as file:///var/lib/q", field="url")
    if url.lower().startswith(LATENCY_PREFIX):
        return _open_latency(url)
    if "://" not in url:
        hint = f" (did you mean file://{url}?)" if url.startswith("/") else ""
        raise InvalidInput(
            f"{url!r} is not a URL; expected <scheme>://..., scheme one of {', '.join(KNOWN)}"
            + hint,
            field="url.scheme",
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidInput(f"cannot parse {url!r}: {exc}", field="url") from None
    scheme = parts.scheme.lower()
    if parts.fragment:
        raise InvalidInput(f"{url!r} has a '#' fragment; percent-encode '#'", field="url.fragment")
    params = _params(parts, url)
    if scheme == "memory":
        return _open_memory(parts, params)
    if scheme == "file":
        return _open_file(parts, params, url)
    for cloud in SCHEMES:
        if scheme == cloud:
            return open_cloud(cloud, unquote(parts.netloc), unquote(parts.path), params)
    raise InvalidInput(
        f"unknown scheme {parts.scheme!r} in {url!r}; expected one of "
        f"{', '.join(KNOWN)} or latency+<url>",
        field="url.scheme",
    )
