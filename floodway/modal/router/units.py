"""What the Modal router keeps per unit, and how it reports it.

A unit is what one Modal class serves: an endpoint, or one lane of an endpoint with
`Route.lanes` (key ``"embed:short"``, class ``EmbedShort``;
`floodway.functions.lanes.served_units`). Each unit's class has its own input queue,
containers and autoscaler, so the router keeps one `UnitState` per unit and builds each
unit's snapshot from its own class's stats (`floodway.modal.router.backend.ModalBackend`).

- `known_cold(endpoint, store_root)`: a unit's cold-start estimate before any start was
  published, from its build's probe on the artifact Volume.
- `runner_loads`: Modal's runners as warm `ContainerLoad`s carrying the router's rows.
- `modal_readiness`: `/readyz`'s detail, keyed by unit like the local pool's, with the same
  ``lanes`` section (`floodway.functions.lanes.lanes_section`).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floodway.build.starts import known_starts
from floodway.build.store import ArtifactStore
from floodway.core.estimators import (
    SERVICE_SAMPLES,
    ArrivalRate,
    ColdStartEstimator,
    ServiceEstimator,
)
from floodway.core.generation import GenerationEstimator
from floodway.core.snapshot import ContainerLoad
from floodway.functions.endpoint import Endpoint
from floodway.functions.lanes import lanes_section
from floodway.modal.contract import is_streaming
from floodway.modal.stats import BOOT_S, COLD_SAMPLES, cold_estimator


def known_cold(endpoint: str, store_root: str | Path | None) -> ColdStartEstimator:
    """The router's cold-start estimate of `endpoint` before a GPU class has published a
    start: its build's cold-start probe on the artifact Volume (`floodway.build.starts`),
    plus `BOOT_S` (Modal's scheduling and snapshot restore, which no container can time:
    the floor of every estimate on Modal, as the measured starts have); the prior where the
    Volume knows nothing (`ColdStartEstimator.known`)."""
    if store_root is None:
        return cold_estimator()
    known = known_starts(ArtifactStore(store_root), endpoint)
    return ColdStartEstimator.known(probe_s=known.probe_s, boot_s=BOOT_S, keep=COLD_SAMPLES)


def runner_loads(runners: int, inflight_rows: int, max_batch_rows: int, slots: int
                 ) -> list[ContainerLoad]:
    """`runners` warm containers carrying `inflight_rows` rows between them, spread evenly
    (the first ones take one more row when they do not divide), each one's rows as batches
    of at most `max_batch_rows`; busy when its batches fill its `slots`."""
    base, extra = divmod(inflight_rows, runners) if runners else (0, 0)
    out = []
    for i in range(runners):
        full, rest = divmod(base + (i < extra), max_batch_rows)
        batches = (max_batch_rows,) * full + ((rest,) if rest else ())
        out.append(ContainerLoad(f"runner-{i}", "ready" if len(batches) < slots else "busy",
                                 batches, slots))
    return out


@dataclass
class UnitState:
    """What the router knows about one unit's class (all times on the backend's clock)."""

    runners: int | None = None          # None: no stats yet
    backlog: int = 0
    stats_at: float | None = None
    tried_at: float = -math.inf
    refreshing: bool = False
    error: str | None = None
    cold: ColdStartEstimator = field(default_factory=cold_estimator)
    cold_read_at: float = -math.inf
    cold_asked: list[float] = field(default_factory=list)
    inflight_rows: int = 0
    inflight: Counter = field(default_factory=Counter)     # tenant -> requests in flight
    service: ServiceEstimator = field(default_factory=ServiceEstimator)
    arrivals: ArrivalRate = field(default_factory=ArrivalRate)
    request_rows: deque = field(default_factory=lambda: deque(maxlen=SERVICE_SAMPLES))
    generation: GenerationEstimator = field(default_factory=GenerationEstimator)
    sequences: Any = None               # a streaming endpoint's modal_book

    def mean_rows(self) -> float:
        rows = self.request_rows
        return sum(rows) / len(rows) if rows else 1.0


def modal_readiness(units: Mapping[str, Endpoint], states: Mapping[str, UnitState],
                    defined: Mapping[str, Endpoint], now_s: float,
                    cold_start_s: Callable[[str], float]) -> dict[str, Any]:
    """`ModalBackend.readiness`: always ready (Modal starts containers on demand), with the
    detail of each unit in `states` (`units`: its endpoint; `defined`: the app's endpoints by
    name; `now_s`: the backend's clock; `cold_start_s(unit)`: its estimate): ``endpoints``
    (a "ready" entry per runner, as the metrics expect), ``queues`` and ``modal`` (runners,
    backlog, in-flight rows, stats age, cold start, last error), by unit key;
    ``sequences`` per streaming endpoint: its sequences in flight (the KV-cache fields 0:
    the containers do not report theirs to the router); ``lanes``: per endpoint with lanes,
    per lane, its class's unit key, bounds, runners (``live_containers``) and backlog
    (``queued``), as the local pool reports its lanes."""
    out: dict[str, Any] = {"ready": True, "backend": "modal", "endpoints": {},
                           "queues": {}, "modal": {}, "sequences": {}}
    for key, st in states.items():
        if is_streaming(units[key]):         # the router's own count; no KV reported
            out["sequences"][key] = {"active": st.inflight_rows, "kv_cache_tokens": 0,
                                     "kv_cache_capacity": 0}
        runners = st.runners or 0
        out["endpoints"][key] = [{"id": f"runner-{i}", "state": "ready"}
                                 for i in range(runners)]
        out["queues"][key] = {"queued": st.backlog, "queued_rows": st.backlog}
        out["modal"][key] = {
            "runners": st.runners, "backlog": st.backlog, "inflight_rows": st.inflight_rows,
            "stats_age_s": None if st.stats_at is None else round(now_s - st.stats_at, 3),
            "cold_start_s": cold_start_s(key), "error": st.error}
    out["lanes"] = lanes_section(
        {key: units[key] for key in states}, defined,
        lambda key: {"live_containers": states[key].runners or 0,
                     "queued": states[key].backlog})
    return out


__all__ = ["UnitState", "known_cold", "modal_readiness", "runner_loads"]
