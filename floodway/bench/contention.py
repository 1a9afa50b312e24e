"""Contention: how much slower a batch runs while more of the endpoint's containers are busy.

Local containers share the machine's cores with each other (and with the router and the
bench client): a batch takes longer while the other containers compute too. A bench run
measures it from its sampling intervals (`floodway.bench.batches.Interval`): each interval's
busy containers are the mean of the count at its two ends, rounded half up and taken as at
least 1 (the interval ran a batch) and at most the containers seen. The count at a sample
is the containers with a batch in flight (``inflight`` > 0 in ``GET /readyz``'s detail,
`busy_of_readiness`), summed over the endpoint's lanes; a router without that detail
leaves it to ``floodway_containers{state="busy"}`` (the local runtime calls a container
busy only when every slot of its pipe is taken, so that gauge undercounts). For each count
k the factor is the interval seconds measured over the seconds the run's fit
(`floodway.bench.batches.fit`, fitted on every interval) gives for the same batches, rows
and padded tokens, summed over the intervals with k busy:

    factor_k = sum(seconds) / sum(per_batch_s * batches + per_row_s * rows
                                  + per_token_s * padded_tokens)

so factor_k > 1 where batches ran slower than the run's mean, < 1 where faster; weighted by
the fit's seconds, the factors average to about 1. The simulator (`floodway.sim.model.
ServiceModel.contention`) multiplies a batch's time by the factor of the busy count when
it starts. In ``batch_times.json`` (format ``floodway.bench.batches/1``; the field is
absent from documents written before it, and null without a container gauge):

    "contention": {"busy_from": "...", "containers": 2,
                   "by_busy": [{"busy": 1, "intervals": 30, "batches": 41, "rows": 120,
                                "seconds": 3.1, "fit_s": 4.2, "factor": 0.74}, ...]}

The load term. The router and the bench client share those cores too, and they are busiest
while requests arrive fastest: measured over six runs of benchmarks/predict.py (2
containers, 2 cores), intervals with 60 or more arrivals/s ran their batches 2-24% slower
than intervals with under 20/s, at the same busy count. Each interval's ratio of measured to
fitted seconds, over its busy count's factor, is fitted by weighted least squares (weights:
the fitted seconds) as ``at_rest + per_rps * a``, `a` the requests the client sent in the
`LOAD_WINDOW_S` before the interval ended, per second; a negative slope is taken as none.
The simulator multiplies a batch's time by ``at_rest + per_rps * a`` at its start, `a` the
trace's arrivals in the window before it (`ServiceModel.load_factor`). In
``batch_times.json``, absent without the client's send times or enough spread in them:

    "load": {"window_s": 1.0, "intervals": 98, "at_rest": 0.93, "per_rps": 0.0022}
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from floodway.bench.batches import Interval
from floodway.sim.model import LOAD_WINDOW_S

BUSY_FROM = ("containers with a batch in flight (GET /readyz), else "
             'floodway_containers{state="busy"}; the mean of each interval\'s two ends')


def busy_of_readiness(doc: Any, endpoint: str) -> int | None:
    """Containers of `endpoint` (all its lanes: units ``endpoint`` and ``endpoint:lane``)
    with a batch in flight in a ``GET /readyz`` document; None when it names none of them
    or gives no ``inflight`` counts."""
    units = doc.get("endpoints") if isinstance(doc, Mapping) else None
    if not isinstance(units, Mapping):
        return None
    cs = [c for unit, lst in units.items() if str(unit).split(":", 1)[0] == endpoint
          and isinstance(lst, list) for c in lst if isinstance(c, Mapping)]
    if not cs or not any("inflight" in c for c in cs):
        return None
    return sum(1 for c in cs if c.get("state") in ("ready", "busy")
               and int(c.get("inflight") or 0) > 0)


def busy_count(iv: Interval, containers: int) -> int | None:
    """The busy containers `iv` is counted under (module docstring); None without a gauge."""
    if iv.busy is None:
        return None
    k = math.floor(iv.busy + 0.5)
    return max(1, min(k, containers)) if containers >= 1 else max(1, k)


def fitted_s(iv: Interval, model: Mapping[str, Any]) -> float:
    """Seconds the fit `model` (`floodway.bench.batches.fit`'s dict) gives for `iv`'s
    batches, rows and padded tokens (tokens count only where both have them)."""
    s = float(model["per_batch_s"]) * iv.batches + float(model["per_row_s"]) * iv.rows
    if iv.tokens is not None:
        s += float(model.get("per_token_s", 0.0)) * iv.tokens
    return s


def contention(intervals: Sequence[Interval], model: Mapping[str, Any] | None,
               containers: int) -> dict[str, Any] | None:
    """The ``contention`` field of the module docstring: one entry per busy count seen, in
    increasing order; None without a fit, without any interval with a busy gauge, or when
    the fit gives no seconds for a count's intervals (nothing to scale)."""
    if model is None:
        return None
    top = max([containers] + [math.floor(iv.busy + 0.5) for iv in intervals
                              if iv.busy is not None])
    groups: dict[int, list[Interval]] = {}
    for iv in intervals:
        k = busy_count(iv, top)
        if k is not None:
            groups.setdefault(k, []).append(iv)
    if not groups:
        return None
    rows = []
    for k, ivs in sorted(groups.items()):
        sec, est = sum(iv.seconds for iv in ivs), sum(fitted_s(iv, model) for iv in ivs)
        if not est > 0:
            return None
        rows.append({"busy": k, "intervals": len(ivs), "batches": sum(iv.batches for iv in ivs),
                     "rows": sum(iv.rows for iv in ivs), "seconds": round(sec, 6),
                     "fit_s": round(est, 6), "factor": round(sec / est, 4)})
    return {"busy_from": BUSY_FROM, "containers": top, "by_busy": rows}


# Fewer intervals with batches than this, or arrival rates spanning less than this many
# requests/s, leave the load term out: nothing to fit a slope on.
LOAD_MIN_INTERVALS = 8
LOAD_MIN_SPAN_RPS = 5.0


def load(intervals: Sequence[Interval], model: Mapping[str, Any] | None,
         by_busy: Mapping[str, Any] | None, sends_s: Sequence[float]) -> dict[str, Any] | None:
    """The ``load`` field of the module docstring, from the intervals, the fit `model`, the
    ``contention`` document `by_busy` (None: no factors) and the client's send times
    (seconds on the intervals' clock); None where it cannot be fitted."""
    if model is None or not sends_s:
        return None
    sends = sorted(sends_s)
    factors = {r["busy"]: r["factor"] for r in (by_busy or {}).get("by_busy", ())}
    top = (by_busy or {}).get("containers", 1)
    a, r, w = [], [], []
    for iv in intervals:
        est = fitted_s(iv, model)
        k = busy_count(iv, top)
        if iv.batches == 0 or not est > 0:
            continue
        a.append((bisect.bisect_right(sends, iv.t_s)
                  - bisect.bisect_right(sends, iv.t_s - LOAD_WINDOW_S)) / LOAD_WINDOW_S)
        r.append(iv.seconds / (est * factors.get(k, 1.0)))
        w.append(est)
    if len(a) < LOAD_MIN_INTERVALS or max(a) - min(a) < LOAD_MIN_SPAN_RPS:
        return None
    x, y, sw = np.array(a), np.array(r), np.sqrt(np.array(w))
    c, d = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T * sw[:, None], y * sw,
                           rcond=None)[0]
    if not d > 0 or not c > 0:        # no slowdown with load (or a fit past zero): none
        c, d = float(np.average(y, weights=np.array(w))), 0.0
    return {"window_s": LOAD_WINDOW_S, "intervals": len(a), "at_rest": round(float(c), 4),
            "per_rps": round(float(d), 6)}


__all__ = ["BUSY_FROM", "LOAD_WINDOW_S", "busy_count", "busy_of_readiness", "contention",
           "fitted_s", "load"]
