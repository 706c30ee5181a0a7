"""Job ids: ULIDs that sort by time and never repeat, even across fork."""

from __future__ import annotations

import os
import random
import sys

import pytest

from osqueue.ids import deterministic_ids, new_id
from osqueue.state import validate


def test_ids_are_valid_unique_and_time_ordered() -> None:
    ids = [new_id() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    for job_id in ids[:50]:
        assert len(job_id) == 26
        validate.job_id(job_id)
    # The first 10 characters are the millisecond clock: never decreasing.
    stamps = [i[:10] for i in ids]
    assert stamps == sorted(stamps)


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")
def test_a_forked_child_does_not_reuse_its_parents_random_bits() -> None:
    new_id()  # the parent now holds a block of random bits
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the random parts of a few ids, then leave at once
        os.close(read_fd)
        os.write(write_fd, " ".join(new_id()[10:] for _ in range(20)).encode())
        os._exit(0)
    os.close(write_fd)
    parent = {new_id()[10:] for _ in range(20)}
    with os.fdopen(read_fd, "rb") as pipe:
        child = set(pipe.read().decode().split())
    os.waitpid(pid, 0)
    assert len(child) == 20
    assert parent.isdisjoint(child)


def test_deterministic_ids_replay_from_a_seed_and_the_system_source_comes_back() -> None:
    def draw(seed: int) -> list[str]:
        clock = iter(range(1_000_000_000, 1_000_000_100))
        with deterministic_ids(random.Random(seed), lambda: next(clock) + 0.25):
            return [new_id() for _ in range(20)]

    first, again, other = draw(7), draw(7), draw(8)
    assert first == again
    assert set(first).isdisjoint(other)
    for job_id in first:
        validate.job_id(job_id)
    # the time part is the given clock: 1_000_000_000.25 s (2001), then one second more per id
    stamps = [job_id[:10] for job_id in first]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 20
    with deterministic_ids(random.Random(7), lambda: 1_000_000_000.25):
        assert new_id()[:10] == first[0][:10]
    outside = new_id()
    assert outside not in first
    assert outside[:10] > first[-1][:10]  # the system clock again
