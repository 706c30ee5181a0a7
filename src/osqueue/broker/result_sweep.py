"""The result sweep: every interval, delete the result objects nothing references."""

from __future__ import annotations

from osqueue.broker.payload_sweep import PayloadSweeper


class ResultSweeper(PayloadSweeper):
    """Runs :meth:`ResultObjects.sweep <osqueue.broker.results.ResultObjects.sweep>`
    every ``interval_s`` while the broker serves, by the payload sweep's rule
    (:mod:`osqueue.broker.orphans`).

    The objects it deletes are those of entries of the record of finished jobs
    that expired or were evicted, and uploads whose completion never committed.
    """

    what = "result"

    def count(self, deleted: int) -> None:
        self._counters.results_swept += deleted
