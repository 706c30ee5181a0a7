"""The chaos seeds a plain ``pytest`` runs (``make test``, CI): a fixed list, so a red
run replays exactly what it ran.

Each backend's test runs once per seed listed for it here
(``test_chaos_on_azure_through_a_faulty_network[1590815008]``).  A seed fixes the
order of the rounds, the victims among the processes that fit a rule, and every
proxy's faults; the processes' own timing still differs from run to run, so a
replay runs the same plan, not the same interleaving.

Fresh seeds belong to ``make chaos`` (``--chaos-seed random``: a new seed per
session, the same on every backend, printed with the figures and on failure);
``--chaos-seed S`` runs seed ``S`` on every backend instead of this list.

**Any seed that ever fails joins this list**, under the backend it failed on, with
the date and what failed; it stays once the cause is fixed, as a regression case.
Each entry costs one chaos run (15 to 30 s) in ``make test``: one per backend
keeps the chaos tests' share of ``make test`` what it was with one fresh seed.

The first entries were chosen so that their first rounds together cover every
kind (checked by ``test_the_listed_seeds_cover_every_kind``).
"""

from __future__ import annotations

#: rounds per backend of a plain run (``--chaos-rounds``; ``make chaos`` runs more)
DEFAULT_ROUNDS = 4

#: backend (``file``, ``s3``, ``azure``) -> the seeds its test runs by default
SEEDS: dict[str, tuple[int, ...]] = {
    "file": (
        59,  # broker-kill, standby-kill, producer-kill, worker-freeze
    ),
    "s3": (
        66,  # broker-freeze, worker-kill, storage-network x2
    ),
    "azure": (
        # 2026-11-25, issue 28: round 4, worker-freeze, "waited 20.0 s for w2 to hear
        # LeaseLost" (clock-step, worker-freeze, client-network, worker-freeze)
        1590815008,
    ),
}
