"""Which lane a request takes (`floodway.config.Lane`), and the key its lane is served
under: pure functions of the endpoint's `Route.lanes` and the request's inputs.

A request's cost is its inputs' estimated tokens summed (`floodway.routers.tokens.
item_tokens`: estimated at admission, no tokenizer; 1 per input that is not text) and its
number of inputs; it takes the first lane it fits. A lane is served as a unit of its own
(containers, queue, estimators) under the key ``"<endpoint>:<lane>"``; an endpoint without
lanes under its name. Endpoint and lane names never hold ':', so the key splits back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

from floodway.config import Build, Lane, Route
from floodway.routers.tokens import item_tokens

SEP = ":"


class LanedEndpoint(Protocol):
    """What lane resolution reads of an endpoint (`floodway.functions.endpoint.Endpoint`)."""

    @property
    def name(self) -> str: ...

    @property
    def route(self) -> Route: ...

    @property
    def build(self) -> Build: ...


def request_cost(endpoint: LanedEndpoint, inputs: Sequence[Any]) -> tuple[int, int]:
    """``(tokens, rows)`` of a request: its inputs' estimated tokens summed (each at most the
    build's `max_seq_len`), and how many inputs it has."""
    max_len = endpoint.build.max_seq_len
    return sum(item_tokens(item, max_len) for item in inputs), len(inputs)


def lane_of(endpoint: LanedEndpoint, inputs: Sequence[Any]) -> Lane | None:
    """The lane of a request of `inputs` to `endpoint`: the first it fits (the last lane
    fits every request); None for an endpoint without lanes."""
    lanes = endpoint.route.lanes
    if not lanes:
        return None
    tokens, rows = request_cost(endpoint, inputs)
    return next((lane for lane in lanes if lane.fits(tokens, rows)), lanes[-1])


def unit_key(endpoint: str, lane: str | None) -> str:
    """The key a lane is served under (``"embed:short"``); `endpoint` itself for None."""
    return endpoint if lane is None else f"{endpoint}{SEP}{lane}"


def split_unit(key: str) -> tuple[str, str | None]:
    """``(endpoint, lane)`` of a key `unit_key` made (lane None for a plain endpoint)."""
    endpoint, sep, lane = key.partition(SEP)
    return endpoint, (lane if sep else None)


def unit_of(endpoint: LanedEndpoint, inputs: Sequence[Any]) -> str:
    """The key the request of `inputs` to `endpoint` is served under."""
    lane = lane_of(endpoint, inputs)
    return unit_key(endpoint.name, None if lane is None else lane.name)


def lane_keys(keys: Iterable[str], endpoint: str) -> list[str]:
    """The keys among `keys` that serve lanes of `endpoint` (``"embed:short"``, ...), in the
    order of `keys` (`floodway.functions.lanes.served_units` keeps the lanes' order)."""
    return [k for k in keys if (s := split_unit(k))[1] is not None and s[0] == endpoint]


def resolve_unit(keys: Collection[str], name: str, inputs: Sequence[Any] | None = None,
                 endpoint: LanedEndpoint | None = None) -> str | None:
    """The key among `keys` (the units a backend serves) that `name` means, for callers that
    know only the endpoint (the job queue): `name` itself when it is a key; for an endpoint
    served as lanes, the lane `inputs` take, judged by `endpoint` (the endpoint as defined,
    with its `Route.lanes`), or its last lane (which takes every request) without `inputs`
    or `endpoint`, or when the lane they take is not among `keys`. None when `name` is
    neither a key nor an endpoint with lanes among `keys`."""
    if name in keys:
        return name
    lanes = lane_keys(keys, name)
    if not lanes:
        return None
    if inputs is None or endpoint is None:
        return lanes[-1]
    key = unit_of(endpoint, inputs)
    return key if key in keys else lanes[-1]


__all__ = ["SEP", "lane_keys", "lane_of", "request_cost", "resolve_unit", "split_unit",
           "unit_key", "unit_of"]
