"""A separate process that races compare-and-set increments on one key.

Usage: ``python cas_worker.py URL KEY N``.  Prints ``ready``, waits for a line
on stdin (the go signal, so every worker starts together), then increments the
integer stored at KEY N times with read / write(if_match) retry loops and
prints ``done <successes> <conflicts>``.  With N = 0 it only probes: prints
``found`` or ``missing`` for KEY.
"""

from __future__ import annotations

import asyncio
import sys

from osqueue.errors import Conflict, NotFound
from osqueue.storage import from_url


async def main(url: str, key: str, count: int) -> None:
    store = from_url(url)
    print("ready", flush=True)
    sys.stdin.readline()
    if count == 0:
        try:
            await store.read(key)
            print("found", flush=True)
        except NotFound:
            print("missing", flush=True)
        return
    done = conflicts = 0
    while done < count:
        blob = await store.read(key)
        try:
            await store.write(key, str(int(blob.data) + 1).encode(), if_match=blob.etag)
        except Conflict:
            conflicts += 1
        else:
            done += 1
    await store.close()
    print(f"done {done} {conflicts}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
