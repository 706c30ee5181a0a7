"""Job ids: ULIDs that sort by time and never repeat, even across fork."""

from __future__ import annotations

import os
import sys

import pytest

from osqueue.ids import new_id
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
