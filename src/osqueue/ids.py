"""Client-chosen job ids: ULIDs (time-ordered, 26 characters of Crockford base32).

Ids are chosen before the first send, so a push retried after a lost answer or
a broker failover carries the same id and is applied once.  The 80 random bits
come from ``os.urandom`` in blocks (one system call per 256 ids); a forked
child drops the block it inherited, so parent and child never share bits.
"""

from __future__ import annotations

import base64
import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> 2 characters
#: RFC 4648 base32 -> Crockford's alphabet (same bit order: 5 bits per character)
_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())
_BLOCK = 256
_lock = threading.Lock()
_pool: list[str] = []
_last_ms = -1
_ms_text = ""


def _forget_pool() -> None:
    """After fork: the child must not hand out the random bits its parent will use."""
    global _lock
    _lock = threading.Lock()
    _pool.clear()


os.register_at_fork(after_in_child=_forget_pool)


def _random80() -> str:
    """80 random bits as 16 characters (10 random bytes base32-encode to exactly 16)."""
    with _lock:
        if not _pool:
            text = base64.b32encode(os.urandom(10 * _BLOCK)).translate(_CROCKFORD).decode()
            _pool.extend(text[i : i + 16] for i in range(0, len(text), 16))
        return _pool.pop()


def _encode(value: int, chars: int) -> str:
    out = []
    for _ in range(chars // 2):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def new_id() -> str:
    """A new ULID: 48 bits of milliseconds then 80 random bits."""
    global _last_ms, _ms_text
    ms = time.time_ns() // 1_000_000
    if ms != _last_ms:
        # 48 bits as 10 characters: the top character carries 3 bits, then 9 more.
        _ms_text = _ALPHABET[(ms >> 45) & 31] + _encode(ms & ((1 << 45) - 1), 10)[1:]
        _last_ms = ms
    return _ms_text + _random80()
