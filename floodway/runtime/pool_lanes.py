"""The local pool's lanes: which unit a name means, and the lanes' readiness detail.

The pool keeps one `EndpointPool` per unit (`floodway.functions.lanes.served_units`): an
endpoint without lanes, or one lane of one (key ``"embed:short"``). Callers that know only
the endpoint (the job queue) name it plainly; `resolve` then picks the lane from the inputs
(`floodway.routers.lanes.lane_of`), or the last lane (which takes every request) when there
are none to judge by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from floodway.routers.lanes import split_unit, unit_key, unit_of

if TYPE_CHECKING:
    from floodway.functions.endpoint import Endpoint
    from floodway.runtime.endpoint_pool import EndpointPool


def lanes_of(endpoints: dict[str, EndpointPool], name: str) -> list[EndpointPool]:
    """The units serving endpoint `name`'s lanes, in lane order (none without lanes)."""
    return [ep for key, ep in endpoints.items()
            if split_unit(key)[1] is not None and split_unit(key)[0] == name]


def resolve(endpoints: dict[str, EndpointPool], name: str,
            inputs: Sequence[Any] | None = None) -> EndpointPool | None:
    """The unit `name` means: itself when it is a unit's key; for an endpoint with lanes,
    the lane `inputs` take (the last lane without inputs); None if unknown."""
    if (ep := endpoints.get(name)) is not None:
        return ep
    lanes = lanes_of(endpoints, name)
    if not lanes:
        return None
    if inputs is None:
        return lanes[-1]
    return endpoints.get(unit_of(lanes[0].endpoint, inputs), lanes[-1])


def lane_readiness(endpoints: dict[str, EndpointPool],
                   defined: dict[str, Endpoint]) -> dict[str, dict[str, Any]]:
    """Per endpoint with lanes (`defined`: the app's endpoints, by name), per lane: its unit
    key, bounds, containers and queue: ``{"embed": {"short": {"unit": "embed:short",
    "max_tokens": 64, "max_rows": None, "min_containers": 0, "max_containers": 1,
    "max_queue": 32, "live_containers": 1, "queued": 0}}}``."""
    out: dict[str, dict[str, Any]] = {}
    for key, ep in endpoints.items():
        name, lane = split_unit(key)
        if lane is None:
            continue
        bounds = next(x for x in defined[name].route.lanes if x.name == lane)
        b = ep.batcher
        out.setdefault(name, {})[lane] = {
            "unit": unit_key(name, lane),
            "max_tokens": bounds.max_tokens,
            "max_rows": bounds.max_rows,
            "min_containers": ep.endpoint.warm.min_containers,
            "max_containers": ep.endpoint.warm.max_containers,
            "max_queue": ep.endpoint.route.max_queue,
            "live_containers": len(ep.live()),
            "queued": b.queued if b is not None else 0,
        }
    return out


__all__ = ["lane_readiness", "lanes_of", "resolve"]
