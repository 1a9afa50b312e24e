"""The warm target of one endpoint: how many containers to keep warm now, and why.

    desired(now_s, history, config, measured, state) -> (WarmTarget, PolicyState)

`desired` is a pure function: the same clock, traffic history, `WarmPool` config, measurements
and policy state always give the same target. The local runtime, the Modal warmers (which pass
the target to ``Function.update_autoscaler``) and the simulator all call it; only the source
of the inputs differs. The names mirror Modal's autoscaler (https://modal.com/docs/guide/scale):

- ``min_containers``: containers kept warm even when the endpoint is idle;
- ``buffer_containers``: extra idle containers kept *while the endpoint is active*, i.e. while
  it has had an input within the last ``scaledown_window``, on top of the containers serving
  inputs: a pool keeps max(min_containers, busy + buffer_containers) (Modal's meaning);
- ``scaledown_window``: seconds an idle container waits before it is stopped (2..3600 on Modal).

Composition (all times in seconds since the epoch, UTC): the config's sources
(`floodway.warmers.sources.sources_for`: the config floor, each `Window`, the predictive
policy) each ask for a floor and maybe a scaledown window; `compose` then applies, once:

1. min_containers = the largest floor asked for (on a tie the later, more specific source
   explains it: predictive > window > config > backlog), capped at ``max_containers``; a
   backlog of queued work that no client waits for (async jobs: `backlog`) asks for the
   containers that drain it within one cold start (`backlog_part`);
2. scaledown_window_s = the last source's that sets one (the predictive policy), else the
   config's, clamped to Modal's range;
3. buffer_containers = the config's while active (an arrival within the last
   ``scaledown_window_s``), else 0, capped so that floor + buffer <= ``max_containers``.

Hysteresis needs memory: it lives in `PolicyState`, an immutable value passed in and returned,
so the function stays pure and a simulator (or a Modal cron, via `to_dict`/`from_dict` in a
`modal.Dict`) can carry it between calls.

Traffic: `History` holds user requests only. Warm-up inferences, health probes and warmer
pings must never be recorded (`floodway.warmers.history.TrafficHistory.record`): counted as
traffic they would keep an idle endpoint "active" and teach the histogram a fake pattern.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from floodway.config import MODAL_SCALEDOWN_MAX_S, MODAL_SCALEDOWN_MIN_S
from floodway.core.priors import COLD_START_PRIOR_S, SERVICE_PRIOR_S
from floodway.warmers.sources import Part, Source, sources_for

if TYPE_CHECKING:
    from floodway.config import WarmPool
    from floodway.warmers.params import PredictiveParams
    from floodway.warmers.predictive import SizingState

MINUTE_S = 60.0
# The shortest time a backlog is planned to drain in (seconds): with a near-zero cold start
# `backlog_part` would otherwise ask for a container per batch of the backlog.
BACKLOG_MIN_HORIZON_S = 1.0


# ---------------------------------------------------------------- inputs

@dataclass(frozen=True, eq=False)
class History:
    """Per-minute arrival counts of one endpoint.

    `counts[i]` is the number of user requests that arrived in epoch minute
    ``start_minute + i`` (epoch minute = floor(unix seconds / 60)), shape (n,), int64,
    read-only. The last minute may be the current one, still filling up.

    Build with `History.from_counts` (simulator, trace replay) or
    `TrafficHistory.history` (the router's store). Compares by identity (it wraps an array).
    `last_arrival_exact_s`: the latest arrival's unix time when the source knows it (the local
    router does), which makes "active" exact instead of minute-rounded.
    """

    start_minute: int
    counts: np.ndarray
    last_arrival_exact_s: float | None = None

    def __post_init__(self) -> None:
        arr = np.asarray(self.counts, dtype=np.int64).reshape(-1)
        if arr.size and int(arr.min()) < 0:
            raise ValueError("History.counts must be non-negative arrival counts")
        if arr is self.counts:
            arr = arr.view()
        arr.flags.writeable = False
        object.__setattr__(self, "counts", arr)
        object.__setattr__(self, "start_minute", int(self.start_minute))

    @classmethod
    def from_counts(cls, counts: Sequence[int] | np.ndarray, start_minute: int = 0) -> History:
        """A history from per-minute counts, the first at epoch minute `start_minute`.

        Raises ValueError on a negative count. The array is copied only if it is not already
        int64 (a trace row can be passed without a copy, then frozen as a read-only view).
        """
        return cls(start_minute, np.asarray(counts, dtype=np.int64))

    @classmethod
    def view_of(cls, history: History, stop: int,
                last_arrival_exact_s: float | None = None) -> History:
        """The first `stop` minutes of `history` (0 <= stop <= its length) as a new `History`
        on a view of its (already checked, read-only) counts: O(1), no copy and no second
        check of the counts, for callers that cut a long history every minute (`upto`, the
        simulator)."""
        out = object.__new__(cls)
        object.__setattr__(out, "start_minute", history.start_minute)
        object.__setattr__(out, "counts", history.counts[:stop])
        object.__setattr__(out, "last_arrival_exact_s", last_arrival_exact_s)
        return out

    @classmethod
    def empty(cls, now_s: float) -> History:
        """No arrivals, ending at the minute of `now_s`."""
        return cls(minute_of(now_s), np.zeros(0, dtype=np.int64))

    @property
    def end_minute(self) -> int:
        """The epoch minute after the last one covered (exclusive end)."""
        return self.start_minute + len(self.counts)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def upto(self, now_s: float) -> History:
        """The minutes up to and including the minute of `now_s` (a view, no copy): a policy
        given a whole trace must not see the future."""
        stop = minute_of(now_s) + 1 - self.start_minute
        if stop >= len(self.counts):
            return self
        exact = self.last_arrival_exact_s
        return History.view_of(self, max(stop, 0),
                               exact if exact is not None and exact <= now_s else None)

    def active_minutes(self) -> np.ndarray:
        """Epoch minutes with at least one arrival, ascending, shape (k,)."""
        return np.flatnonzero(self.counts) + self.start_minute

    def last_arrival_minute(self) -> int | None:
        """The epoch minute of the latest arrival, or None without any.

        Searched backwards in blocks growing fourfold from 64 minutes: the same answer as
        the last nonzero of the whole array, in time proportional to the minutes since the
        last arrival rather than to the length of the history."""
        counts = self.counts
        hi, step = counts.size, 64
        if hi and counts[hi - 1]:
            return hi - 1 + self.start_minute
        while hi > 0:
            lo = max(hi - step, 0)
            nz = np.flatnonzero(counts[lo:hi])
            if nz.size:
                return int(nz[-1]) + lo + self.start_minute
            hi, step = lo, step * 4
        return None

    def last_arrival_s(self, now_s: float | None = None) -> float | None:
        """The latest instant the latest arrival may have happened: the end of its minute,
        or `now_s` if that is earlier (the minute is the current one). None without any.

        The end, not the start, of the minute: "active" then lasts the full scaledown window
        after the real arrival, never less (Modal counts from the last input)."""
        m = self.last_arrival_minute()
        if m is None:
            return None
        exact = self.last_arrival_exact_s
        if exact is not None and minute_of(exact) == m:
            return exact if now_s is None else min(exact, now_s)
        end = (m + 1) * MINUTE_S
        return end if now_s is None else min(end, now_s)

    def idle_times_min(self) -> np.ndarray:
        """Idle times (ITs) between consecutive arrivals in whole idle minutes, shape (k-1,)
        for k active minutes, oldest first.

        Arrivals in consecutive minutes give 0, one arrival every 10 minutes gives 9 (the nine
        fully idle minutes between them). Several arrivals within one minute are one busy
        minute: the per-minute record cannot see sub-minute gaps.
        """
        act = np.flatnonzero(self.counts)
        return np.diff(act) - 1 if act.size > 1 else np.zeros(0, dtype=np.int64)

    def _last(self, now_s: float, minutes: int) -> np.ndarray:
        end = minute_of(now_s) + 1 - self.start_minute
        lo = max(end - max(int(minutes), 1), 0)
        return self.counts[lo:max(end, 0)]

    def rate_per_s(self, now_s: float, minutes: int) -> float:
        """Mean arrivals per second over the `minutes` minutes ending with the minute of
        `now_s` (minutes outside the history count as zero)."""
        return float(self._last(now_s, minutes).sum()) / (max(int(minutes), 1) * MINUTE_S)

    def peak_rate_per_s(self, now_s: float, minutes: int) -> float:
        """The busiest of the last `minutes` minutes (ending with the minute of `now_s`),
        as arrivals per second: sizes a burst by its peak, not by its average."""
        last = self._last(now_s, minutes)
        return float(last.max()) / MINUTE_S if last.size else 0.0


def minute_of(t_s: float) -> int:
    """The epoch minute holding unix time `t_s`."""
    return math.floor(t_s / MINUTE_S)


@dataclass(frozen=True)
class Measured:
    """What was measured of an endpoint (defaults are priors until something is measured).

    `cold_start_s`: seconds from asking for a container to its first ready answer (default
    `floodway.core.priors.COLD_START_PRIOR_S`). `service_s`: seconds one request holds a
    container (default `floodway.core.priors.SERVICE_PRIOR_S`, one row of the batch prior).
    `concurrency`: requests one container serves at once (default 1). For a batching
    endpoint use `from_batches` (`floodway.core.estimators.measured`). Raises ValueError on
    a negative time or a concurrency <= 0.
    """

    cold_start_s: float = COLD_START_PRIOR_S
    service_s: float = SERVICE_PRIOR_S
    concurrency: float = 1.0

    def __post_init__(self) -> None:
        if not (self.cold_start_s >= 0 and self.service_s >= 0):
            raise ValueError(f"Measured times must be >= 0, got cold_start_s="
                             f"{self.cold_start_s!r}, service_s={self.service_s!r}")
        if not self.concurrency > 0:
            raise ValueError(f"Measured.concurrency must be > 0, got {self.concurrency!r}")

    @classmethod
    def from_batches(cls, cold_start_s: float, batch_s: float, batch_rows: int,
                     rows_per_request: float = 1.0) -> Measured:
        """A container that runs one batch of `batch_rows` rows in `batch_s` seconds serves
        ``batch_rows / rows_per_request`` requests per `batch_s`: in Little's law that is a
        service time of `batch_s` at that concurrency."""
        return cls(cold_start_s, batch_s, max(batch_rows / max(rows_per_request, 1e-9), 1e-9))

    @classmethod
    def from_tokens(cls, cold_start_s: float, tokens_per_s: float, max_sequences: int,
                    tokens_per_request: float, prefill_s: float = 0.0) -> Measured:
        """A generation container decodes `tokens_per_s` tokens per second with all of its
        `max_sequences` sequences running (continuous batching); a request costs
        `tokens_per_request` generated tokens and `prefill_s` seconds of prefill. So it holds
        the container for ``tokens_per_request / tokens_per_s + prefill_s`` seconds of its
        time: in Little's law a service time of `max_sequences` times that at concurrency
        `max_sequences` (`floodway.core.generation.measured_generation` fills it from the
        generation estimator). Raises ValueError on tokens_per_s <= 0 or max_sequences < 1."""
        if not (tokens_per_s > 0 and max_sequences >= 1):
            raise ValueError(f"Measured.from_tokens needs tokens_per_s > 0 and max_sequences "
                             f">= 1, got {tokens_per_s!r}, {max_sequences!r}")
        share_s = max(tokens_per_request, 0.0) / tokens_per_s + max(prefill_s, 0.0)
        return cls(cold_start_s, share_s * max_sequences, float(max_sequences))


# ---------------------------------------------------------------- outputs

@dataclass(frozen=True)
class WarmTarget:
    """What to ask the autoscaler for (Modal's names and meanings; see the module docstring).

    `reason` says in words which source set each number, e.g.
    ``"min 4: window '55 8 * * 1-5' opens in 40 s; buffer 0: idle"``.
    """

    min_containers: int
    buffer_containers: int
    scaledown_window_s: float
    reason: str

    def keep(self, busy: int, cap: int) -> int:
        """Containers a pool keeps live with `busy` of them serving inputs: the buffer is
        idle containers on top of the busy ones (Modal's autoscaler: with min 2 and buffer 1,
        a third starts once both are busy), at least `min_containers`, at most `cap`."""
        want = max(self.min_containers, busy + self.buffer_containers) \
            if self.buffer_containers else self.min_containers
        return min(want, cap)


@dataclass(frozen=True)
class PolicyState:
    """The memory of `desired` between calls for one endpoint (start with `PolicyState()`).

    `sizing`: the Little's-law hysteresis state (`floodway.warmers.predictive.SizingState`);
    None until the predictive policy first ran.
    """

    sizing: SizingState | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (for a `modal.Dict` or a file between warmer runs)."""
        return {"sizing": None if self.sizing is None else self.sizing.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PolicyState:
        """The inverse of `to_dict`; None or an empty mapping gives a fresh state."""
        from floodway.warmers.predictive import SizingState

        raw = (data or {}).get("sizing")
        return cls(None if raw is None else SizingState.from_dict(raw))


# ---------------------------------------------------------------- the policy

def clamp_scaledown_s(seconds: float) -> float:
    """Clamp to Modal's accepted ``scaledown_window`` range (2..3600 s)."""
    return float(min(max(seconds, MODAL_SCALEDOWN_MIN_S), MODAL_SCALEDOWN_MAX_S))


def desired(now_s: float, history: History, config: WarmPool, measured: Measured,
            state: PolicyState | None = None, *, params: PredictiveParams | None = None,
            backlog: float = 0.0) -> tuple[WarmTarget, PolicyState]:
    """The warm target at `now_s` (unix seconds) and the state to pass to the next call.

    `history` may extend past `now_s` (a whole trace): only minutes up to the minute of
    `now_s` are used. `config` is assumed valid (the decorator validates it). `params` tunes
    the predictive policy (default `PredictiveParams()`). `backlog`: queued work no client
    waits for (async jobs), in the units `measured` counts requests in (rows for a batching
    endpoint measured per row, sequences for a streaming one). Pure: no clock, no I/O. The
    config's sources composed by `compose` (see the module docstring).
    """
    return compose(sources_for(config, params), now_s, history, measured, state,
                   cap=config.container_cap, buffer_containers=config.buffer_containers,
                   scaledown_window_s=config.scaledown_window_s, backlog=backlog)


def backlog_part(backlog: float, measured: Measured) -> Part | None:
    """The containers that drain `backlog` (requests as `measured` counts them) at their
    measured capacity within one cold start: ceil(work / cold start), at least 1 (None for
    no backlog). Work = backlog x `service_s` / `concurrency` container-seconds. Why one
    cold start: a container asked for now serves only after it, so with more the work would
    be done before they come; fewer leave the backlog to drain slower than it could."""
    if backlog <= 0:
        return None
    work_s = backlog * measured.service_s / measured.concurrency
    horizon_s = max(measured.cold_start_s, BACKLOG_MIN_HORIZON_S)
    n = max(1, math.ceil(work_s / horizon_s))
    return Part(n, f"backlog of {backlog:g} queued ({work_s:.1f} s of work, drained within "
                   f"a cold start of {horizon_s:.1f} s)")


def compose(sources: Sequence[Source], now_s: float, history: History, measured: Measured,
            state: PolicyState | None = None, *, cap: int, buffer_containers: int,
            scaledown_window_s: float, backlog: float = 0.0) -> tuple[WarmTarget, PolicyState]:
    """One `WarmTarget` from what `sources` (and a `backlog`, see `desired`) ask at `now_s`,
    with the bounds (`cap`), the buffer (`buffer_containers` while active) and the scaledown
    clamping applied once (see the module docstring); the policy state after every source
    ran. `scaledown_window_s` holds where no source sets one. Pure."""
    state = state or PolicyState()
    history = history.upto(now_s)
    backlog_floor = backlog_part(backlog, measured)
    floors: list[Part] = [] if backlog_floor is None else [backlog_floor]
    scaledown_s, scaledown_why = scaledown_window_s, "config"
    for source in sources:
        floor, state = source(now_s, history, measured, state)
        if floor is None:
            continue
        floors.append(floor.part)
        if floor.scaledown_s is not None:
            scaledown_s, scaledown_why = floor.scaledown_s, floor.scaledown_why
    scaledown_s = clamp_scaledown_s(scaledown_s)

    # On a tie the later, more specific source explains the number, so that "0" still says
    # e.g. when the next pre-warm comes.
    best = max(reversed(floors), key=lambda p: p.containers) if floors \
        else Part(0, "no source asks for containers")
    floor_n = min(best.containers, cap)
    floor_why = best.why
    if best.containers > cap:
        floor_why += f" (capped at max_containers {cap})"

    last_s = history.last_arrival_s(now_s)
    active = last_s is not None and now_s - last_s < scaledown_s
    buffer = min(buffer_containers, cap - floor_n) if active else 0
    if active:
        buffer_why = f"active, last arrival {now_s - last_s:.0f} s ago"  # type: ignore[operator]
    else:
        buffer_why = "idle" if last_s is None else \
            f"idle for {now_s - last_s:.0f} s >= scaledown window"
    reason = (f"min {floor_n}: {floor_why}; buffer {buffer}: {buffer_why}; "
              f"scaledown {scaledown_s:.0f} s: {scaledown_why}")
    return WarmTarget(floor_n, buffer, scaledown_s, reason), state


__all__ = [
    "BACKLOG_MIN_HORIZON_S", "COLD_START_PRIOR_S", "SERVICE_PRIOR_S", "History", "Measured",
    "PolicyState", "WarmTarget",
    "backlog_part", "clamp_scaledown_s", "compose", "desired", "minute_of",
]
