"""A discrete-event simulator that drives the same `decide()` and warm-pool policy code as the
router and the warmers over a trace: `simulate` (`floodway.sim.engine`) for batched
endpoints, `simulate_generation` (`floodway.sim.generation`) for streaming ones. The model,
the module map and the exact fast path: docs/design/simulator.md.
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
