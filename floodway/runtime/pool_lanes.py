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

from floodway.functions.lanes import lanes_section
from floodway.routers.lanes import lane_keys, resolve_unit, split_unit

if TYPE_CHECKING:
    from floodway.functions.endpoint import Endpoint
    from floodway.runtime.endpoint_pool import EndpointPool


def lanes_of(endpoints: dict[str, EndpointPool], name: str) -> list[EndpointPool]:
    """The units serving endpoint `name`'s lanes, in lane order (none without lanes)."""
    return [endpoints[key] for key in lane_keys(endpoints, name)]


def resolve(endpoints: dict[str, EndpointPool], name: str,
            inputs: Sequence[Any] | None = None, *,
            defined: Endpoint | None = None) -> EndpointPool | None:
    """The unit `name` means: itself when it is a unit's key; for an endpoint with lanes,
    the lane `inputs` take, judged by `defined` (the endpoint as the app defines it, with
    its `Route.lanes`: a lane's own endpoint has none), else the last lane; None if unknown
    (`floodway.routers.lanes.resolve_unit`)."""
    key = resolve_unit(endpoints, name, inputs, defined)
    return None if key is None else endpoints[key]


def job_backlog(endpoints: dict[str, EndpointPool], ep: EndpointPool,
                rows: dict[str, int]) -> int:
    """The job backlog rows (`rows`: per endpoint, from the job store) that count as
    demand on `ep`'s warm pool: its endpoint's, for a plain endpoint; for a lane, the job
    rows queued in its own batcher, and the store's backlog only for the last lane (which
    queued job takes which lane is known only from its inputs, read when it is claimed;
    the last lane takes every request, and claims follow the lanes' room)."""
    name, lane = split_unit(ep.name)
    if lane is None:
        return rows.get(name, 0)
    own = ep.batcher.rows_by_priority[0] if ep.batcher is not None else 0
    last = lanes_of(endpoints, name)[-1] is ep
    return own + (rows.get(name, 0) if last else 0)


def lane_readiness(endpoints: dict[str, EndpointPool],
                   defined: dict[str, Endpoint]) -> dict[str, dict[str, Any]]:
    """Per endpoint with lanes (`defined`: the app's endpoints, by name), per lane: its unit
    key, bounds, containers and queue: ``{"embed": {"short": {"unit": "embed:short",
    "max_tokens": 64, "max_rows": None, "min_containers": 0, "max_containers": 1,
    "max_queue": 32, "live_containers": 1, "queued": 0}}}``
    (`floodway.functions.lanes.lanes_section`, the same on Modal)."""
    def load(key: str) -> dict[str, int]:
        ep = endpoints[key]
        return {"live_containers": len(ep.live()),
                "queued": ep.batcher.queued if ep.batcher is not None else 0}

    return lanes_section({key: ep.endpoint for key, ep in endpoints.items()}, defined, load)


__all__ = ["job_backlog", "lane_readiness", "lanes_of", "resolve"]
