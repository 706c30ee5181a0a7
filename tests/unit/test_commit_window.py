"""The commit window behind ``BrokerInfo.perf`` (what ``osqueue top`` and the dashboard
show): exact commit and op counts over the window, quantiles of the newest commits,
and memory bounded at any commit rate (it kept every commit of the last minute: a
broker at 30,000 commits a second held 1.8 million and sorted them every 5 s)."""

from __future__ import annotations

from osqueue.broker.observe.counters import WINDOW_SAMPLES, CommitWindow


def test_the_summary_counts_every_commit_of_the_window_and_ranks_their_durations() -> None:
    window = CommitWindow(window_s=60.0, refresh_s=5.0)
    assert window.perf(0.0) is None
    for i in range(1000):  # 10 s of commits: 1 ms to 1 s, each with 3 ops
        window.add(100.0 + i / 100, (i + 1) / 1000, 3)
    perf = window.perf(110.0)
    assert perf is not None
    assert (perf.commits, perf.ops) == (1000, 3000)
    assert (perf.p50_ms, perf.p99_ms) == (501.0, 991.0)
    assert window.perf(111.0) is perf  # within refresh_s: the same summary


def test_commits_older_than_the_window_leave_it() -> None:
    window = CommitWindow(window_s=60.0, refresh_s=0.0)
    for i in range(100):
        window.add(10.0 + i / 10, 0.002, 1)  # seconds 10 to 19
    window.add(100.0, 0.004, 5)
    perf = window.perf(100.5)  # the window starts at 40.5
    assert perf is not None
    assert (perf.commits, perf.ops, perf.p50_ms) == (1, 5, 4.0)
    assert window.perf(500.0) is None  # all of it left


def test_a_busy_broker_keeps_a_bounded_sample_and_still_counts_every_commit() -> None:
    window = CommitWindow(window_s=60.0, refresh_s=5.0)
    commits = 3 * WINDOW_SAMPLES
    for i in range(commits):
        window.add(1000.0 + i * 1e-4, 0.001 if i < WINDOW_SAMPLES * 2 else 0.009, 2)
    perf = window.perf(1000.0 + commits * 1e-4)
    assert perf is not None
    assert (perf.commits, perf.ops) == (commits, 2 * commits)
    assert len(window._samples) == WINDOW_SAMPLES
    assert perf.p50_ms == 9.0  # the newest commits' durations
