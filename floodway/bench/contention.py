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
while requests arrive fastest: the containers get what they leave. Each interval's CPU
seconds of the router process (``process_cpu_seconds_total``) and the client
(`time.process_time`), over its length, are the cores they took, `o`; measured over a
time-scale-3 run of benchmarks/predict.py (2 containers, 2 cores), the workers' own CPU
fell by 0.94 cores per core they took (correlation -0.75), and `o` grew with the rate
requests were sent at, by 2.2 ms of CPU per request over 0.13 cores at rest. So `o` is
fitted by least squares as ``other_cores + other_per_request_s * a``, `a` the requests the
client sent in the interval per second (both >= 0). A batch's container then gets
``share = min(1, (cores - o) / busy)`` of a core (`floodway.sim.model.CpuShare`), and the
batch time over the fit (over its busy count's factor) is ``at_rest / share``: `at_rest`
is that ratio times each interval's share at its measured `o`, averaged with the fitted
seconds as weights. The simulator takes `a` as the trace's arrivals in the `LOAD_WINDOW_S`
before a batch starts. Only for a router on this machine (`cores` given); in
``batch_times.json``, absent without the router's and the client's CPU or enough spread in
the rate:

    "load": {"window_s": 1.0, "intervals": 98, "cores": 2, "other_cores": 0.13,
             "other_per_request_s": 0.0022, "at_rest": 0.9}
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from floodway.bench.batches import INTERVAL_S, Interval
from floodway.sim.model import LOAD_WINDOW_S, CpuShare

BUSY_FROM = ("containers with a batch in flight (GET /readyz), else "
             'floodway_containers{state="busy"}; the mean of each interval\'s two ends')


def _containers(doc: Any, endpoint: str) -> list[Mapping]:
    """The container entries of `endpoint` (all its lanes: units ``endpoint`` and
    ``endpoint:lane``) in a ``GET /readyz`` document; [] when it names none."""
    units = doc.get("endpoints") if isinstance(doc, Mapping) else None
    if not isinstance(units, Mapping):
        return []
    return [c for unit, lst in units.items() if str(unit).split(":", 1)[0] == endpoint
            and isinstance(lst, list) for c in lst if isinstance(c, Mapping)]


def busy_of_readiness(doc: Any, endpoint: str) -> int | None:
    """Containers of `endpoint` (all its lanes) with a batch in flight in a ``GET /readyz``
    document; None when it names none of them or gives no ``inflight`` counts."""
    cs = _containers(doc, endpoint)
    if not any("inflight" in c for c in cs):
        return None
    return sum(1 for c in cs if c.get("state") in ("ready", "busy")
               and int(c.get("inflight") or 0) > 0)


def cpu_of_readiness(doc: Any, endpoint: str) -> float | None:
    """CPU seconds so far of `endpoint`'s containers (all its lanes) in a ``GET /readyz``
    document (``cpu_s``: their workers', `floodway.runtime.procstat`); None when none of
    them gives it."""
    got = [c["cpu_s"] for c in _containers(doc, endpoint)
           if isinstance(c.get("cpu_s"), (int, float))]
    return float(sum(got)) if got else None


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
         by_busy: Mapping[str, Any] | None, sends_s: Sequence[float],
         cores: int | None = None) -> dict[str, Any] | None:
    """The ``load`` field of the module docstring, from the intervals (with their `cpu_s`),
    the fit `model`, the ``contention`` document `by_busy` (None: no factors), the client's
    send times (seconds on the intervals' clock) and the machine's `cores`; None where it
    cannot be fitted (no cores, no CPU measured, too few intervals or too little spread)."""
    if model is None or not sends_s or not cores or cores < 1:
        return None
    sends = sorted(sends_s)
    factors = {r["busy"]: r["factor"] for r in (by_busy or {}).get("by_busy", ())}
    top = (by_busy or {}).get("containers") or max(
        [1] + [math.floor(iv.busy + 0.5) for iv in intervals if iv.busy is not None])
    a, o, r, w, k = [], [], [], [], []
    for iv in intervals:
        est, span = fitted_s(iv, model), iv.t_s - iv.since_s
        if iv.batches == 0 or not est > 0 or iv.cpu_s is None or not span > 0:
            continue
        a.append((bisect.bisect_right(sends, iv.t_s) - bisect.bisect_right(sends, iv.since_s))
                 / span)
        o.append(iv.cpu_s / span)
        k.append(busy_count(iv, top) or 1)
        r.append(iv.seconds / (est * factors.get(k[-1], 1.0)))
        w.append(est)
    if len(a) < LOAD_MIN_INTERVALS or max(a) - min(a) < LOAD_MIN_SPAN_RPS:
        return None
    x, y = np.array(a), np.array(o)
    c, d = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)[0]
    if not d >= 0:                     # no more CPU the faster requests come: a flat level
        c, d = float(y.mean()), 0.0
    elif not c >= 0:                   # through the origin
        c, d = 0.0, float(x @ y / (x @ x))
    shares = [CpuShare(cores).share(oi, ki) for oi, ki in zip(o, k, strict=True)]
    at_rest = float(np.average(np.array(r) * np.array(shares), weights=np.array(w)))
    return {"window_s": LOAD_WINDOW_S, "intervals": len(a), "cores": int(cores),
            "other_cores": round(float(c), 4), "other_per_request_s": round(float(d), 7),
            "at_rest": round(at_rest, 4)}


# Other work on the machine (`Interval.foreign_cpu_s`) taking more cores than this in an
# interval marks it disturbed. Measured: in five time-scale-3 runs of benchmarks/predict.py
# with nothing else running, at most 0.13 cores (the sampling's own skew); a busy loop
# beside a run shows as about 1.
DISTURBED_CORES = 0.25


def foreign(intervals: Sequence[Interval]) -> dict[str, Any] | None:
    """What other work on the machine took during the intervals: ``{"over_cores":
    DISTURBED_CORES, "most_cores": 0.13, "mean_cores": 0.01, "disturbed_s": [[15.7, 17.4],
    ...]}``, the spans (seconds into the replay, adjacent intervals merged) of intervals over
    `DISTURBED_CORES`, over intervals at least half `INTERVAL_S` long; None where it was not
    measured (a router elsewhere)."""
    # A short interval (the last sample, after the replay) magnifies the samples' skew.
    known = [iv for iv in intervals if iv.foreign_cpu_s is not None
             and iv.t_s - iv.since_s >= INTERVAL_S / 2]
    if not known:
        return None
    cores = [iv.foreign_cpu_s / (iv.t_s - iv.since_s) for iv in known]
    spans: list[list[float]] = []
    for iv, c in zip(known, cores, strict=True):
        if c <= DISTURBED_CORES:
            continue
        if spans and iv.since_s <= spans[-1][1] + 1e-6:
            spans[-1][1] = iv.t_s
        else:
            spans.append([iv.since_s, iv.t_s])
    return {"over_cores": DISTURBED_CORES, "most_cores": round(max(cores), 3),
            "mean_cores": round(sum(cores) / len(cores), 3),
            "disturbed_s": [[round(a, 3), round(b, 3)] for a, b in spans]}


def disturbed_text(doc: Mapping[str, Any]) -> str:
    """`foreign`'s spans as text: "15.7-17.4 s, 20.0-20.3 s"."""
    return ", ".join(f"{a:.1f}-{b:.1f} s" for a, b in doc["disturbed_s"])


__all__ = ["BUSY_FROM", "DISTURBED_CORES", "LOAD_WINDOW_S", "busy_count", "busy_of_readiness",
           "contention", "cpu_of_readiness", "disturbed_text", "foreign", "fitted_s", "load"]
