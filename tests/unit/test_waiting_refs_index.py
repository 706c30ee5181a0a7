"""The references to waiting children keep, in step with every change, what a commit
asks of them: the due ones (the load planner reads those only) and the length of
their section (every push measures the document), so a commit pays nothing for
an object nothing touched."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import msgspec

from osqueue.state import Document, decode, encode
from osqueue.state.waiting_refs import ColdWaiting, WaitingAside, WaitingRef

SHA = "0" * 64


def ref(n: int, after: tuple[str, ...], failed: tuple[str, ...] = ()) -> WaitingRef:
    return WaitingRef(
        key=f"waiting/k{n:03d}.jsonl",
        count=3,
        size_bytes=10,
        sha256=SHA,
        min_id=f"c{n:03d}a",
        max_id=f"c{n:03d}z",
        queue="q",
        after=after,
        failed=failed,
    )


def measured(cold: ColdWaiting) -> int:
    fresh = ColdWaiting()
    fresh.refs, fresh._frags, fresh.aside = cold.refs, cold._frags, cold.aside
    return fresh.framed_bytes()


def test_the_due_keys_and_the_section_length_follow_every_change() -> None:
    rng = random.Random(7)
    cold = ColdWaiting()
    at = datetime(2027, 1, 1, tzinfo=UTC)
    n = 0
    for step in range(400):
        move = rng.random()
        listed = list(cold.refs.values())
        if move < 0.3 or not listed:
            parents = tuple(f"p{rng.randrange(6)}" for _ in range(rng.randint(0, 2)))
            cold.add(ref(n, tuple(dict.fromkeys(parents))))
            n += 1
        elif move < 0.6:
            old = rng.choice(listed)
            if old.after:  # a parent ends (done, or failed)
                parent = old.after[0]
                failed = old.failed + ((parent,) if rng.random() < 0.2 else ())
                cold.replace(msgspec.structs.replace(old, after=old.after[1:], failed=failed))
        elif move < 0.75:
            cold.remove(rng.choice(listed).key)
        elif move < 0.85:
            cold.set_aside(WaitingAside(rng.choice(listed), "missing", at))
        elif cold.aside:
            cold.readmit(rng.choice(list(cold.aside)))
        copy = cold.copy() if step % 50 == 0 else cold
        want = [r.key for r in copy.refs.values() if r.due]
        assert sorted(copy.due) == sorted(want), step
        assert copy.framed_bytes() == measured(copy), step


def test_a_decoded_document_knows_its_due_references() -> None:
    doc = Document.empty()
    doc.waiting_cold.add(ref(1, ("p1",)))
    doc.waiting_cold.add(ref(2, ()))
    doc.waiting_cold.add(ref(3, ("p1",), failed=("p2",)))
    again = decode(encode(doc))
    assert list(again.waiting_cold.due) == ["waiting/k002.jsonl", "waiting/k003.jsonl"]
    assert again.waiting_cold.framed_bytes() == doc.waiting_cold.framed_bytes()
