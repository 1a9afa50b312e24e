"""The endpoints an app is served as: each endpoint, or one per lane of an endpoint with
`Route.lanes` (`floodway.config_lanes`).

A lane's endpoint is the endpoint with `lane` set and its own bounds: the lane's
`min_containers` / `max_containers` in its `WarmPool` (the endpoint's where the lane sets
none) and its share of `Route.max_queue` (at least 1 when the endpoint queues at all). The
function, model and build are the endpoint's: every lane runs the same build.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from floodway.config_lanes import queue_shares
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


__all__ = ["lane_endpoints", "served_units"]
