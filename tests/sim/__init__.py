"""Deterministic simulation of osqueue under faults (virtual time, one seeded RNG).

``run_seed(seed)`` builds the cluster the seed describes (brokers, standbys,
producers, workers over a fault-injecting store), runs it on virtual time,
heals it, and checks the history by every rule of :mod:`sim.checker` (I1 to
I9).  A failing report names the one command that replays the seed.
"""

from sim.checker import check
from sim.config import FAMILY_NAMES, Nemesis, SimConfig, config_for
from sim.history import History, Kind, Problem, Rule, Violation
from sim.loop import SimulationStuck, VirtualTimeLoop, run_virtual
from sim.run import Report, Sim, quiet_logs, run_config, run_seed
from sim.store import CrashTrigger, Fault, FaultRates, NodeStorage, Phase, SharedStore

__all__ = [
    "FAMILY_NAMES",
    "CrashTrigger",
    "Fault",
    "FaultRates",
    "History",
    "Kind",
    "Nemesis",
    "NodeStorage",
    "Phase",
    "Problem",
    "Report",
    "Rule",
    "SharedStore",
    "Sim",
    "SimConfig",
    "SimulationStuck",
    "Violation",
    "VirtualTimeLoop",
    "check",
    "config_for",
    "quiet_logs",
    "run_config",
    "run_seed",
    "run_virtual",
]
