"""The benchmark core behind ``osqueue bench`` and ``benchmarks/``.

``run_bench(BenchConfig(...))`` starts a broker on a storage URL, optionally
preloads jobs, runs N closed-loop clients each doing push -> claim -> complete,
and returns a :class:`BenchResult` whose ``to_dict()`` is the JSON line
``{"ops_per_s", "jobs_per_s", "p50_ms", "p99_ms", "commits", "avg_batch",
"storage", "clients"}``.  ``run_remote_bench`` does the same with the broker
in a child process (``osqueue broker``) and the clients talking to it over
gRPC.  ``bench_command`` is the CLI's entry point.
"""

from __future__ import annotations

from osqueue.bench.broker_process import BrokerProcess
from osqueue.bench.config import RESULT_KEYS, BenchConfig, BenchResult
from osqueue.bench.remote import check_shareable, run_remote_bench
from osqueue.bench.runner import bench_command, format_result, run_bench
from osqueue.bench.workload import run_workload

__all__ = [
    "RESULT_KEYS",
    "BenchConfig",
    "BenchResult",
    "BrokerProcess",
    "bench_command",
    "check_shareable",
    "format_result",
    "run_bench",
    "run_remote_bench",
    "run_workload",
]
