"""A local container's states, their legal transitions, and what it keeps per batch
(`floodway.runtime.container` drives them)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from floodway.runtime.protocol import ItemEvent, ItemId


class State(enum.StrEnum):
    STARTING = "starting"
    WARMING = "warming"
    READY = "ready"
    BUSY = "busy"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.STARTING: frozenset({State.WARMING, State.FAILED, State.DRAINING, State.STOPPED}),
    State.WARMING: frozenset({State.READY, State.FAILED, State.DRAINING, State.STOPPED}),
    State.READY: frozenset({State.BUSY, State.DRAINING, State.FAILED}),
    State.BUSY: frozenset({State.READY, State.DRAINING, State.FAILED}),
    State.DRAINING: frozenset({State.STOPPED, State.FAILED}),
    State.STOPPED: frozenset(),
    State.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass(frozen=True)
class BatchResult:
    """One batch's answer: outputs and error messages keyed by item id; `compute_s` is the
    time the endpoint function took inside the worker; `service_s` the time the container
    spent on the batch as the router sees it (from when the worker could start it to its
    answer: compute plus reading, encoding and the pipe), which feeds the service-time fit."""

    outputs: dict[ItemId, Any]
    errors: dict[ItemId, str]
    rows: int
    compute_s: float
    service_s: float = 0.0


@dataclass(slots=True)
class _Pending:
    """One batch in flight: when it was sent, its item events so far, who hears of them."""

    sent_s: float
    on_item: Callable[[ItemEvent], None] | None
    ids: frozenset[ItemId] = frozenset()
    outputs: dict[ItemId, Any] = field(default_factory=dict)
    errors: dict[ItemId, str] = field(default_factory=dict)


__all__ = ["TRANSITIONS", "BatchResult", "IllegalTransition", "State"]
