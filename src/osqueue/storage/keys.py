"""Object keys: one rule for every backend, so a key valid on one store is valid on all.

A key is a relative ``/``-separated path: not empty, no leading or trailing
``/``, no empty, ``.`` or ``..`` segment, no control character (NUL included),
at most 255 UTF-8 bytes per segment and 1024 in all (S3's limit).  Any other
character is fine: spaces, unicode, ``=``, ``+``, ``%``, ``#``, ``?``.
Segments starting with ``.osqueue-`` are reserved for the backends' own files
(the ``file://`` store's temporary files and locks).
"""

from __future__ import annotations

import re

from osqueue.errors import InvalidInput

#: Segment prefix of files a backend keeps for itself; never a user key.
RESERVED_PREFIX = ".osqueue-"
MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255


_CONTROL = re.compile("[\x00-\x1f\x7f]")


#: Keys made only of plain segments (no segment starting with ".", so no ".", ".." or
#: reserved one; ASCII, at most 201 characters each) are valid without the full check.
_PLAIN = re.compile(
    r"(?:[A-Za-z0-9_=\-][A-Za-z0-9._=\-]{0,200}/){0,30}[A-Za-z0-9_=\-][A-Za-z0-9._=\-]{0,200}"
)


def _has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def _check_segment(segment: str, key: str, field: str) -> None:
    if segment in ("", ".", ".."):
        what = "an empty segment" if not segment else f"a {segment!r} segment"
        raise InvalidInput(f"{key!r} has {what}; keys are relative paths", field=field)
    if segment.startswith(RESERVED_PREFIX):
        raise InvalidInput(
            f"{key!r}: segments starting with {RESERVED_PREFIX!r} are reserved", field=field
        )
    if len(segment.encode()) > MAX_SEGMENT_BYTES:
        raise InvalidInput(
            f"{key!r} has a segment longer than {MAX_SEGMENT_BYTES} bytes", field=field
        )


#: Plain keys already checked (the document's key is written every commit); emptied
#: when full, so one-off keys (archive objects, payloads) never make it large.
_CHECKED: set[str] = set()
_CHECKED_MAX = 512


def check_key(key: object, field: str = "key") -> str:
    """Return ``key`` if it is a valid object key, else raise ``InvalidInput`` naming ``field``."""
    # The fast path: a plain str key (not a subclass) of safe characters needs no more.
    if type(key) is str:
        if key in _CHECKED:
            return key
        if len(key) <= MAX_KEY_BYTES and _PLAIN.fullmatch(key):
            if len(_CHECKED) >= _CHECKED_MAX:
                _CHECKED.clear()
            _CHECKED.add(key)
            return key
    if not isinstance(key, str):
        raise InvalidInput(f"must be a str, not {type(key).__name__}", field=field)
    if not key:
        raise InvalidInput("must not be empty", field=field)
    if _has_control(key):
        raise InvalidInput(f"{key!r} contains a control character (NUL included)", field=field)
    if key.startswith("/"):
        raise InvalidInput(f"{key!r} is absolute; keys are relative to the store", field=field)
    if len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidInput(f"longer than {MAX_KEY_BYTES} bytes", field=field)
    for segment in key.split("/"):
        _check_segment(segment, key, field)
    return key


def check_prefix(prefix: object, field: str = "prefix") -> str:
    """Validate a listing prefix: ``""``, or a key's start (it may end in ``/`` or mid-segment)."""
    if not isinstance(prefix, str):
        raise InvalidInput(f"must be a str, not {type(prefix).__name__}", field=field)
    if not prefix:
        return prefix
    if _has_control(prefix):
        raise InvalidInput(f"{prefix!r} contains a control character", field=field)
    if prefix.startswith("/"):
        raise InvalidInput(f"{prefix!r} is absolute; prefixes are relative", field=field)
    for segment in prefix.split("/")[:-1]:
        _check_segment(segment, prefix, field)
    return prefix


def as_bytes(data: object, field: str = "data") -> bytes:
    """Return ``data`` as ``bytes`` (copying a bytearray or memoryview), else raise."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise InvalidInput(f"must be bytes, not {type(data).__name__}", field=field)
