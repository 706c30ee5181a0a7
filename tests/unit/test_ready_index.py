"""A queue's ready entries (``osqueue.state.index.Ready``) against a plain heap.

The sorted run and its heap must give exactly what one heap of the same
entries gives: the same smallest entry after any mix of pushes (in order or
not), loaded chunks (before, between or after what is there, or interleaved),
claims and a spill's slice cut out, and the same entries below or above any
bound.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from osqueue.state.index import Index, Ready, ReadyEntry
from osqueue.state.model import StoredJob, to_datetime

_entries = st.tuples(st.integers(0, 2), st.integers(0, 400)).map(
    lambda ps: (ps[0], ps[1], f"j{ps[1]:03d}p{ps[0]}")
)
_step = st.one_of(
    st.tuples(st.just("push"), _entries),
    st.tuples(st.just("extend"), st.lists(_entries, min_size=1, max_size=12, unique=True)),
    st.tuples(st.just("pop"), st.integers(1, 6)),
    st.tuples(st.just("discard"), st.integers(0, 2), st.integers(0, 400), st.integers(0, 60)),
)


def _first(heap: list[ReadyEntry], ready: Ready) -> ReadyEntry | None:
    entry = Index(ready={"q": ready}).head("q", _AlwaysLive())
    return entry if heap or entry is not None else None


class _AlwaysLive(dict[str, StoredJob]):
    """Every id names a queued job of the entry's seq (no entry is stale)."""

    def get(self, job_id: str, default: object = None) -> StoredJob:  # type: ignore[override]
        seq = int(job_id[1:4])
        t = to_datetime(0.0)
        return StoredJob(id=job_id, queue="q", seq=seq, status="queued", created_at=t)


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=40))
def test_the_run_and_its_heap_give_what_one_heap_gives(steps: list[tuple[object, ...]]) -> None:
    ready, model = Ready(), []
    for step in steps:
        kind = step[0]
        if kind == "push":
            entry = step[1]
            assert isinstance(entry, tuple)
            ready.push(entry)
            heapq.heappush(model, entry)
        elif kind == "extend":
            chunk = sorted(step[1])  # type: ignore[call-overload]
            ready.extend(chunk)
            for entry in chunk:
                heapq.heappush(model, entry)
        elif kind == "pop":
            for _ in range(int(step[1])):  # type: ignore[call-overload]
                if not model:
                    break
                assert _first(model, ready) == model[0]
                ready.pop()
                heapq.heappop(model)
        else:
            _, priority, seq, span = step
            assert isinstance(priority, int)
            assert isinstance(seq, int)
            assert isinstance(span, int)
            lo, hi = (priority, seq, ""), (priority, seq + span, "k")
            ids = {e[2] for e in model if lo <= e <= hi}
            ready.discard(lo, hi, ids)
            model = [e for e in model if e[2] not in ids]
            heapq.heapify(model)
        assert len(ready) == len(model)
        assert sorted(ready) == sorted(model)
        listed = ready.entries()  # the planner's copy: what iterating gives, as a new list
        assert listed == list(ready)
        listed.append((9, 9, "not the ready's"))
        assert len(ready) == len(model)
        assert _first(model, ready) == (model[0] if model else None)
        bound = (1, 200)
        assert sorted(ready.before(bound)) == sorted(e for e in model if e < bound)
        assert ready.after(bound) == sorted(e for e in model if e > bound)
        copied = ready.copy()
        assert sorted(copied) == sorted(model)
        assert len(copied) == len(model)


def test_a_loaded_chunk_goes_into_the_run_as_one_slice() -> None:
    ready = Ready()
    head = [(0, s, f"h{s}") for s in range(10, 20)]
    tail = [(0, s, f"t{s}") for s in range(100, 110)]
    ready.extend(head)
    for entry in tail:
        ready.push(entry)  # pushes: each the highest seq so far
    ready.extend([(0, s, f"c{s}") for s in range(50, 60)])  # a load, between the two
    assert not ready.heap
    assert ready.run == sorted(ready.run)
    for _ in range(12):  # claims take the head, then the chunk: the run's front
        ready.pop()
    assert not ready.heap
    assert ready.run[ready.start] == (0, 52, "c52")
    ready.extend([(0, s, f"b{s}") for s in range(20, 30)])  # before the front: taken slots
    assert not ready.heap
    assert ready.run[ready.start] == (0, 20, "b20")
    assert ready.one_priority() == 0
    ready.push((0, 5, "back"))  # a job put back with its old seq: the heap
    assert ready.heap == [(0, 5, "back")]
    assert ready.one_priority() is None
    # a spill's slice of the tail is cut out of the run (and only its ids)
    ready.discard((0, 100, ""), (0, 104, "t104"), {f"t{s}" for s in range(100, 104)})
    assert [e for e in ready.run[ready.start :] if e[1] >= 100] == [
        (0, 104, "t104"),
        *((0, s, f"t{s}") for s in range(105, 110)),
    ]
