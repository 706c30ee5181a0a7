"""Client-chosen job ids: ULIDs (time-ordered, 26 characters of Crockford base32).

Ids are chosen before the first send, so a push retried after a lost answer or
a broker failover carries the same id and is applied once.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """A new ULID: 48 bits of milliseconds then 80 random bits."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))
