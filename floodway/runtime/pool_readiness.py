"""The local pool's readiness: every unit's `EndpointPool.describe()`, gathered for
`/readyz` (`floodway.runtime.pool.Pool.readiness`) and /metrics (its container events)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from floodway.runtime.endpoint_pool import EndpointPool


def readiness(endpoints: dict[str, EndpointPool]) -> dict[str, Any]:
    """The pool's readiness: ``{"ready", "endpoints", "queues", "warm_targets",
    "container_events", "failures", "sequences"}``; ready once every endpoint has a warm
    container (or is scaled to zero by its policy); `failures`: failed starts in a row and
    the last container error, per endpoint (why nothing becomes ready); `sequences`: each
    streaming endpoint's running sequences and KV cache (`EndpointPool.sequences`)."""
    detail = {name: ep.describe() for name, ep in endpoints.items()}
    return {"ready": all(ep.ready() for ep in endpoints.values()),
            "endpoints": {name: d["containers"] for name, d in detail.items()},
            "queues": {name: d["queue"] for name, d in detail.items()
                       if endpoints[name].batcher is not None},
            "warm_targets": {name: d["target"] for name, d in detail.items()},
            "container_events": {name: d["events"] for name, d in detail.items()},
            "failures": {name: d["failures"] for name, d in detail.items()},
            "sequences": {name: d["sequences"] for name, d in detail.items()
                          if "sequences" in d}}


__all__ = ["readiness"]
