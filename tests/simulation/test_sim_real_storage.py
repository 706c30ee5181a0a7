"""The simulation over real storage protocols: a sample of seeds over moto's S3
server and over Azurite, each through a faulty proxy (``sim.realstore``).

Each seed runs the brokers, producers and workers of its family with the
simulator's own faults (503s, lost answers, 412 echoes, held writes, crashes
at commit steps, pauses, clock jumps) between the nodes and the store, and
the proxy's network faults (dropped answers, delays, resets) between obstore
and the server.  The store's answers are the server's: its ETags, its
412/409/404 to conditional writes, its listings.  Every rule of the checker
must hold, as in the in-memory sweep.

``--real-seeds N`` sets the sample (default 8 per server, seeds 0 to N - 1:
eight different families); ``make soak`` runs more.  A failing seed re-runs
with ``python -m sim sweep --storage moto|azurite SEED 1`` (not byte for byte:
the server and the proxy answer in real time).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

import pytest
from sim import VirtualTimeLoop, config_for, quiet_logs, run_config, run_virtual
from sim.realstore import BACKENDS, reach, trimmed


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", BACKENDS)
def test_seeds_over_real_storage(
    backend: str,
    real_seeds: range,
    request: pytest.FixtureRequest,
    keep_reports: Callable[[Iterable[str]], None],
) -> None:
    real = reach(request.getfixturevalue(f"{backend}_server"))
    reports = []
    with quiet_logs():
        for seed in real_seeds:
            cfg, rng = config_for(seed)
            reports.append(run_config(trimmed(cfg), rng, real=real))
    keep_reports(r.as_json() for r in reports)
    bad = [r for r in reports if not r.ok]
    assert bad == [], "\n\n".join(r.summary() for r in bad) + (
        f"\n\nre-run one with: python -m sim sweep --storage {backend} {bad[0].seed} 1"
    )
    assert {r.storage for r in reports} == {backend}
    faults: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    for r in reports:
        faults.update(r.faults)
        answers.update(r.answers)
    network = sum(n for kind, n in faults.items() if kind.startswith("net_"))
    assert network > 0, f"the proxy injected nothing: {dict(faults)}"
    assert sum(faults.values()) >= 10 * len(reports), f"too few faults: {dict(faults)}"
    if len(reports) >= 2:  # seed 1 is a bootstrap race: three brokers create at once
        assert answers["refused"] > 0, "the server never refused a conditional write"
    assert all(r.acknowledged and r.versions for r in reports)


def test_virtual_time_stands_still_while_a_real_request_is_out() -> None:
    """The loop waits for a real answer for real: a timer due in 10 virtual seconds does
    not fire while a request (here a thread taking 0.2 real seconds) is out."""
    fired: list[float] = []

    async def main() -> tuple[float, list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        answer: asyncio.Future[str] = loop.create_future()

        def server() -> None:  # a slow server: the latency is the point, not a sync
            time.sleep(0.2)
            loop.call_soon_threadsafe(answer.set_result, "ok")

        loop.call_later(10.0, lambda: fired.append(loop.time()))
        loop.real_io += 1
        threading.Thread(target=server).start()
        try:
            assert await answer == "ok"
        finally:
            loop.real_io -= 1
        at = loop.time()
        await asyncio.sleep(20.0)  # no request out: virtual time jumps again
        return at, list(fired)

    answered_at, fired_after = run_virtual(main())
    assert answered_at < 0.01
    assert fired_after == [pytest.approx(10.0, abs=0.01)]
