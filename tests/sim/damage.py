"""Cold objects the store loses or corrupts, restored and readmitted by an operator.

In the families that name prefixes (``SimConfig.damage``: ``dead/`` in
"dead-segments", ``waiting/`` in "waiting-cold"), the :class:`Damager` picks, a
few times during the faults, an object the last version references under one of
them and deletes it from the server or flips one of its bytes (straight at the
server: the store's record of puts keeps what was written, so the checker's
rules still know the object's jobs).  A dead object is read only by a retry
of dead letters, so after damaging one the damager retries them all, as an
operator would (a retry the checker counts like the operator's).  A broker
that reads it then finds it missing or failing its check and sets its
reference aside (its jobs are reported, not lost: ASIDE_KEPT and the rules
of each kind).  Once a version shows it aside, the damager puts the object
back as it was written and asks the broker to readmit it
(``readmit_segment``, retried until answered), and the jobs come back once.
An object the brokers never read while it was damaged is put back at the end
of the faults all the same.

Its timing and choices come from a side RNG of its own, so a family without
damage runs exactly as before.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from osqueue.broker.inproc.client import LocalClient
from osqueue.errors import InvalidInput, LeaseLost, Retryable
from osqueue.state import Document, decode
from sim.actors import Client

if TYPE_CHECKING:
    from sim.run import Sim

#: how often the damager looks at the last version that landed (virtual seconds)
_WATCH_S = 0.5


def listed(doc: Document, prefix: str) -> set[str]:
    """The keys of the objects under ``prefix`` that ``doc`` references (not aside)."""
    if prefix == "dead/":
        return {ref.key for ref in doc.dead}
    return set(doc.waiting_cold.refs)


def aside(doc: Document, prefix: str) -> set[str]:
    """The keys under ``prefix`` that ``doc`` sets aside."""
    return set(doc.dead.aside if prefix == "dead/" else doc.waiting_cold.aside)


class Damager(Client):
    """Loses or corrupts referenced cold objects, then restores and readmits them."""

    def __init__(self, sim: Sim, name: str) -> None:
        super().__init__(sim, name)
        self.rng = random.Random(f"osqueue-sim-damage/{sim.cfg.seed}")

    def _last(self) -> Document | None:
        landed = self.sim.store.landed
        return decode(landed[-1].data) if landed else None

    async def run(self) -> None:
        cfg = self.sim.cfg
        end = self.sim.now() + cfg.fault_phase_s
        tasks = []
        for _ in range(cfg.damages):
            await asyncio.sleep(self.rng.uniform(0.05, 0.4) * cfg.fault_phase_s)
            prefix = self.rng.choice(cfg.damage)
            keys: list[str] = []
            while not keys and self.sim.now() < end:  # until a version references one
                doc = self._last()
                keys = sorted(listed(doc, prefix)) if doc is not None else []
                if not keys:
                    await asyncio.sleep(_WATCH_S)
            if keys:
                key = self.rng.choice(keys)
                tasks.append(asyncio.ensure_future(self._damage(prefix, key, end)))
        if tasks:
            await asyncio.gather(*tasks)

    async def _damage(self, prefix: str, key: str, end: float) -> None:
        store, sim = self.sim.store, self.sim
        put = store.segment_puts.get(key)
        if put is None:
            return
        written = put[1]
        if self.rng.random() < 0.5:
            await store.inner.delete(key)
            sim.faults["object_lost"] += 1
        else:
            at = self.rng.randrange(len(written))
            broken = written[:at] + bytes([written[at] ^ 0x20]) + written[at + 1 :]
            await store.inner.put(key, broken)
            sim.faults["object_corrupted"] += 1
        if prefix == "dead/":  # an operator retries the dead letters: a broker reads it
            await self.retry_dead("retry-after-damage")
        while sim.now() < end:  # until a broker read it and set it aside
            doc = self._last()
            if doc is not None and (key in aside(doc, prefix) or key not in listed(doc, prefix)):
                break
            await asyncio.sleep(_WATCH_S)
        await store.inner.put(key, written)  # restored from a backup, as it was written
        while True:  # readmit it whenever a version shows it aside (until the run ends)
            doc = self._last()
            if doc is not None and key in aside(doc, prefix):
                await self._readmit(key)
            elif doc is not None and key not in listed(doc, prefix) and sim.now() >= end:
                return
            await asyncio.sleep(_WATCH_S)

    async def _readmit(self, key: str) -> None:
        attempt = 0
        while True:
            try:
                await self.call(lambda c: LocalClient.readmit_segment(c, key))
                self.sim.faults["object_readmitted"] += 1
                return
            except InvalidInput:
                return  # not aside any more (an answer lost), or another read failed
            except (Retryable, LeaseLost):
                await self.backoff(attempt)
                attempt = min(attempt + 1, 6)
