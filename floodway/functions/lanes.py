"""The endpoints an app is served as: each endpoint, or one per lane of an endpoint with
`Route.lanes` (`floodway.config.Lane`).

A lane's endpoint is the endpoint with `lane` set and its own bounds: the lane's
`min_containers` / `max_containers` in its `WarmPool` (the endpoint's where the lane sets
none) and its share of `Route.max_queue` (at least 1 when the endpoint queues at all). The
function, model and build are the endpoint's: every lane runs the same build.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from floodway.config import queue_shares
from floodway.functions.endpoint import Endpoint


def lane_endpoints(endpoint: Endpoint) -> tuple[Endpoint, ...]:
    """What `endpoint` is served as: itself without lanes, else one endpoint per lane (in
    the lanes' order, `unit` ``name:lane``)."""
    lanes = endpoint.route.lanes
    if not lanes:
        return (endpoint,)
    warm, route = endpoint.warm, endpoint.route
    out = []
    for lane, share in zip(lanes, queue_shares(lanes), strict=True):
        lo = warm.min_containers if lane.min_containers is None else lane.min_containers
        hi = warm.max_containers if lane.max_containers is None else lane.max_containers
        queue = 0 if route.max_queue == 0 else max(1, math.floor(route.max_queue * share))
        out.append(dataclasses.replace(
            endpoint, lane=lane.name,
            warm=dataclasses.replace(warm, min_containers=lo, max_containers=hi),
            route=dataclasses.replace(route, max_queue=queue, lanes=())))
    return tuple(out)


def served_units(endpoints: Iterable[Endpoint]) -> dict[str, Endpoint]:
    """Every unit `endpoints` are served as, by key (`Endpoint.unit`)."""
    return {unit.unit: unit for ep in endpoints for unit in lane_endpoints(ep)}


def lanes_section(units: Mapping[str, Endpoint], defined: Mapping[str, Endpoint],
                  load: Callable[[str], Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """`/readyz`'s ``lanes`` section, the same on every backend: per endpoint with lanes, per
    lane, its unit key and bounds, then what `load(unit key)` tells of its load (the local
    pool: ``live_containers``, ``queued``; Modal: the lane class's runners and backlog).
    `units`: unit key -> the endpoint it serves (`served_units`; units without a lane are
    left out); `defined`: the app's endpoints by name (the lanes' token and row bounds).
    ``{"embed": {"short": {"unit": "embed:short", "max_tokens": 64, "max_rows": None,
    "min_containers": 0, "max_containers": 1, "max_queue": 32, **load("embed:short")}}}``;
    raises KeyError for a unit whose endpoint or lane `defined` does not have."""
    out: dict[str, dict[str, Any]] = {}
    for key, unit in units.items():
        if unit.lane is None:
            continue
        bounds = {x.name: x for x in defined[unit.name].route.lanes}[unit.lane]
        out.setdefault(unit.name, {})[unit.lane] = {
            "unit": key,
            "max_tokens": bounds.max_tokens,
            "max_rows": bounds.max_rows,
            "min_containers": unit.warm.min_containers,
            "max_containers": unit.warm.max_containers,
            "max_queue": unit.route.max_queue,
            **load(key),
        }
    return out


__all__ = ["lane_endpoints", "lanes_section", "served_units"]
