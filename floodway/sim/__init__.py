"""A discrete-event simulator that drives the same `decide()` and warm-pool policy code as the
router and the warmers over a trace (see `floodway.sim.engine`).

    engine.py   the run (`Simulator`): arrivals, decide() or the fast path, bulk segments
    pool.py     containers, batches, the router's queue, async jobs and the deadline
                hand-off, policy ticks, the event heap; carries out
                `floodway.core.reconcile`'s plans
    fastpath.py exact shortcuts: the dispatch test, bulk segments of traffic dispatched (or
                queued and drained into a batch at once)
    kernel.py   the compiled (numba) kernel that replays a bulk segment over arrays
    collect.py  the SimResult of a run, segments' busy intervals spliced in order
    model.py    measured cold-start and service-time models (a bench run's batch times)
    costs.py    a request's tokens, where the runtime counts them
    policy.py   policies to compare: floodway's `desired`, the hybrid histogram alone
    trace.py    per-request and per-minute traces
    result.py   SimResult
    plot.py     the PNG: arrivals, warm and busy containers over time
"""

from floodway.sim.engine import DecisionMismatch, SimConfig, simulate
from floodway.sim.model import ColdStartModel, ServiceModel
from floodway.sim.policy import DesiredPolicy, HistogramPolicy, Policy
from floodway.sim.result import ACTIONS, CODES, SimResult
from floodway.sim.trace import Trace, read_trace

__all__ = [
    "ACTIONS", "CODES", "ColdStartModel", "DecisionMismatch", "DesiredPolicy", "HistogramPolicy",
    "Policy", "ServiceModel", "SimConfig", "SimResult", "Trace", "read_trace", "simulate",
]
