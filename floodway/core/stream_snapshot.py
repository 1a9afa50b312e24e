"""The snapshot builder for streaming endpoints: each runtime's view of its containers'
sequences -> `decide_stream()`'s `StreamSnapshot` (as `floodway.core.snapshot` is for batches).

    build_stream_snapshot(now_s, endpoint, containers, queue, model=, cold_start_s=,
                          max_sequences=, kv_cache_tokens=, max_new_tokens=,
                          max_containers=, async_accepting=) -> StreamSnapshot

The local pool (from each worker's `Load` messages and the sequences it sent), the Modal
router (its calls in flight per container) and the simulator describe each container as a
`SequenceLoad` and their queue as a `SequenceQueue`, take the fitted `GenerationModel` from a
`floodway.core.generation.GenerationEstimator` and the cold start from a
`ColdStartEstimator`; the rest is computed here, once:

- the running sequences end, in order, after the expected order statistics of their
  remaining tokens (``model.expected_ends``): a sequence whose streamed tokens are known (the
  router's count) has min(N, max_new_tokens) - streamed left, N drawn from the measured
  lengths longer than what it streamed; one itemized without them its max_new_tokens minus
  the tokens streamed (the bound); one the runtime cannot itemize min(N, the endpoint's
  cap) from its start. While nothing is measured every one runs to its cap. The k-th ends
  after its tokens at the container's current step time, ``model.step_s(active)``:
  conservative, since steps get faster as sequences leave;
- KV room: the container's reported budget and use (`Load.kv_cache_tokens` /
  `kv_cache_capacity`); a container that reports none (a bring-your-own engine: zeros) is
  limited by its slots only. One ending sequence frees the mean reservation;
- a starting container is ready after the rest of the measured cold start
  (`start_remaining_s`), and the cold-start estimate is never shorter than the longest start
  still running.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from floodway.config import Route, WarmPool
from floodway.core.estimators import start_remaining_s
from floodway.core.generation import GenerationModel
from floodway.routers.decide import WARM
from floodway.routers.decide_stream import SequenceQueue, StreamContainer, StreamSnapshot

STARTING = frozenset({"starting", "warming"})
EMPTY_SEQUENCE_QUEUE = SequenceQueue()


class StreamEndpointConfig(Protocol):
    """What the builder reads of an endpoint: an `Endpoint`, or the simulator's config."""

    @property
    def route(self) -> Route: ...

    @property
    def warm(self) -> WarmPool: ...


@dataclass(frozen=True)
class SequenceLoad:
    """One container of a streaming endpoint as a runtime knows it.

    `state`: starting | warming | ready | busy | draining | stopped | failed. `active`:
    sequences on it (sent and not ended, the worker's `Load.active_sequences` or the router's
    own count); `max_sequences`: its slots (`Generation.max_sequences`); `remaining_tokens`:
    per running sequence the router can itemize, its max_new_tokens minus the tokens
    streamed so far (any order; fewer entries than `active`: the rest are not itemized);
    `generated_tokens`: the tokens each of those has streamed, in the same order (empty:
    unknown, and the remaining tokens are taken as they are);
    `kv_tokens` / `kv_capacity`: KV-cache tokens reserved and its budget (0 / 0: not
    reported); `pending_prompt_tokens`: prompt tokens of sequences sent that have no first
    token yet (not prefilled); `starting_for_s`: seconds since its start was asked for.
    """

    id: str
    state: str
    active: int = 0
    max_sequences: int = 1
    remaining_tokens: tuple[int, ...] = ()
    generated_tokens: tuple[int, ...] = ()
    kv_tokens: int = 0
    kv_capacity: int = 0
    pending_prompt_tokens: int = 0
    starting_for_s: float = 0.0


def stream_container(load: SequenceLoad, model: GenerationModel, cold_start_s: float, *,
                     max_new_tokens: int, kv_cache_tokens: float = math.inf
                     ) -> StreamContainer:
    """`load` as `decide_stream()` sees it (see the module docstring). `kv_cache_tokens`:
    the configured budget, used for a starting container (inf: none)."""
    if load.state not in WARM:
        ready_in = start_remaining_s(cold_start_s, load.starting_for_s) \
            if load.state in STARTING else 0.0
        return StreamContainer(load.id, load.state, 0, load.max_sequences,
                               kv_capacity=kv_cache_tokens, kv_free_tokens=kv_cache_tokens,
                               ready_in_s=ready_in)
    rem = [max(1, int(r)) for r in load.remaining_tokens]
    done = [max(0, int(g)) for g in load.generated_tokens[:len(rem)]]
    active = max(int(load.active), len(rem))
    others = active - len(rem)                   # not itemized: from their start
    ends_tokens = model.expected_ends(
        done + [0] * others, [g + r for g, r in zip(done, rem, strict=False)] +
        [max(1, int(max_new_tokens))] * others, exact=rem[len(done):])
    step = model.step_s(active)
    ends = tuple(r * step for r in ends_tokens)
    if load.kv_capacity > 0:
        cap, used = float(load.kv_capacity), float(max(0, load.kv_tokens))
        free, per = max(0.0, cap - used), (used / active if active else 0.0)
    else:
        cap, free, per = math.inf, math.inf, 0.0
    state = "ready" if active < load.max_sequences else "busy"
    return StreamContainer(load.id, state, active, load.max_sequences, ends, free, per, cap,
                           max(0, int(load.pending_prompt_tokens)), 0.0)


def build_stream_snapshot(now_s: float, endpoint: StreamEndpointConfig,
                          containers: Iterable[SequenceLoad],
                          queue: SequenceQueue = EMPTY_SEQUENCE_QUEUE, *,
                          model: GenerationModel, cold_start_s: float, max_sequences: int,
                          kv_cache_tokens: int | None = None, max_new_tokens: int = 256,
                          max_containers: int | None = None, async_accepting: bool = True
                          ) -> StreamSnapshot:
    """`decide_stream()`'s view of `endpoint` at `now_s` (seconds on the runtime's clock).

    `model` (with the measured lengths of sequences) and `cold_start_s` come from the
    estimators; `max_sequences`, `kv_cache_tokens` (None: no KV budget known) and
    `max_new_tokens` (the cap, for sequences the runtime cannot itemize) from the endpoint's
    `Generation` config; `max_containers` as in `build_snapshot` (default the warm pool's
    cap)."""
    loads = tuple(containers)
    cold = max([cold_start_s, *(c.starting_for_s for c in loads if c.state in STARTING)])
    kv = math.inf if kv_cache_tokens is None else float(kv_cache_tokens)
    views = tuple(stream_container(c, model, cold, max_new_tokens=max_new_tokens,
                                   kv_cache_tokens=kv) for c in loads)
    return StreamSnapshot(
        now_s=now_s, containers=views, model=model, cold_start_s=cold,
        max_sequences=int(max_sequences), max_queue=endpoint.route.max_queue,
        max_containers=endpoint.warm.container_cap if max_containers is None
        else max_containers, kv_cache_tokens=kv, spill=endpoint.route.spill, queue=queue,
        async_accepting=async_accepting)


__all__ = ["EMPTY_SEQUENCE_QUEUE", "SequenceLoad", "SequenceQueue", "StreamEndpointConfig",
           "build_stream_snapshot", "stream_container"]
