"""Client-chosen job ids: ULIDs (time-ordered, 26 characters of Crockford base32).

Ids are chosen before the first send, so a push retried after a lost answer or
a broker failover carries the same id and is applied once.  The 80 random bits
come from ``os.urandom`` in blocks (one system call per 1,024 ids): each
random byte gives one character, its low 5 bits mapped through a table (256
is a multiple of 32, so every character is equally likely), which is C-speed
work with no per-id arithmetic.  A forked child drops the block it
inherited, so parent and child never share bits.

A test or a simulation that must replay exactly draws its ids from a seeded
source instead (:func:`deterministic_ids`): inside the ``with`` block every
``new_id()`` in the process takes its time from the given function and its
random bits from the given ``random.Random``.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> 2 characters
#: a random byte -> a character of the alphabet (its low 5 bits)
_BYTE_CHAR = bytes.maketrans(bytes(range(256)), _ALPHABET.encode() * 8)
_BLOCK = 1024
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
    """80 random bits as 16 characters (16 random bytes, 5 bits of each)."""
    pool = _pool
    while True:
        try:
            return pool.pop()  # atomic: threads never get the same characters
        except IndexError:
            with _lock:
                if not pool:
                    text = os.urandom(16 * _BLOCK).translate(_BYTE_CHAR).decode()
                    pool.extend(text[i : i + 16] for i in range(0, len(text), 16))


def _encode(value: int, chars: int) -> str:
    out = []
    for _ in range(chars // 2):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def _ms_chars(ms: int) -> str:
    """48 bits of milliseconds as 10 characters: the top one carries 3 bits, then 9 more."""
    return _ALPHABET[(ms >> 45) & 31] + _encode(ms & ((1 << 45) - 1), 10)[1:]


#: set by :func:`deterministic_ids`: where ``new_id`` draws from instead of the system
_source: Callable[[], str] | None = None


def new_id() -> str:
    """A new ULID: 48 bits of milliseconds then 80 random bits."""
    global _last_ms, _ms_text
    if _source is not None:
        return _source()
    ms = time.time_ns() // 1_000_000
    if ms != _last_ms:
        _ms_text = _ms_chars(ms)
        _last_ms = ms
    return _ms_text + _random80()


@contextlib.contextmanager
def deterministic_ids(rng: random.Random, time_s: Callable[[], float]) -> Iterator[None]:
    """Within the block, ``new_id()`` is a function of ``rng`` and ``time_s`` alone.

    ``time_s()`` gives the milliseconds (seconds since the epoch; a simulation
    passes its virtual clock) and ``rng.getrandbits(80)`` the random part, so
    a seeded run makes the same ids every time.  For tests and simulations:
    it is process-wide (every thread), and blocks nest (the inner one wins
    until it ends).
    """
    global _source

    def draw() -> str:
        ms = max(0, int(time_s() * 1000)) & ((1 << 48) - 1)
        return _ms_chars(ms) + _encode(rng.getrandbits(80), 16)

    previous, _source = _source, draw
    try:
        yield
    finally:
        _source = previous
