"""Busy periods of one warm container, for every arrival at once (numpy), for
`floodway.sim.fastpath`.

Suppose arrival j finds the only warm container idle and the router's queue empty, every
arrival until the container is idle again is dispatched, and nothing else happens meanwhile
(no policy tick, idle check or container start). Then its busy period is fixed by the
arrivals alone, batch by batch (as in the event loop):

- batch 1 opens at j and starts at ``s1 = t_j + wait_s`` (``t_j`` if its rows fill a batch);
- batch k starts when batch k-1 ends (``s_k = e_(k-1)``), and ``e_k = s_k + fit.seconds(rows_k)``;
- batch k takes the arrivals from its opener o_k on that come before it starts (``t < s_k``:
  a batch joins only while unstarted, and a batch end is processed before an arrival at the
  same instant) while their rows fit ``max_batch_rows`` (the first that does not fit opens the
  next batch, and later arrivals join the newest batch): ``m_k = min(first index with t >=
  s_k, last index whose rows still fit)``, at least o_k + 1;
- the next arrival m_k opens batch k+1 if it comes before e_k, the latest end; else the
  container is idle when it comes, and the busy period ends: the next one starts at m_k.

Every step is a few vector operations over the arrivals whose busy period is still going
(`max_batches` steps at most; longer busy periods are left to the caller's exact loop). A
busy period is *valid* when its conditions of "every arrival is dispatched" hold for sure:
each budget is positive; every arrival after the first finds a free slot (counted with the
batch ends before it); and the backlog test of `decide` passes with margin, checked once for
the whole trace: ``min(slots, max_batches)`` batches of the largest fitted time plus the
largest `alone`, times (1 + 1e-9), within the smallest ``budget * HEADROOM`` (the engine's
backlog is a running float sum of these times; the margin covers its rounding). The ends are
the same float expressions as the event loop's, so a valid busy period's results are exact.
"""

from __future__ import annotations

import numpy as np

from floodway.routers.decide import HEADROOM, ServiceTime


class BusyPeriods:
    """`valid`, `end`, `nxt` (lists, per arrival j): whether j's busy period is valid, the
    end of its last batch, and the arrival that starts the next one. `gather(J)` gives the
    batches of the busy periods started at J (a chain: each the next one of the last)."""

    def __init__(self, times: np.ndarray, rows: np.ndarray | None, budget: np.ndarray,
                 start: np.ndarray, alone_end: np.ndarray, fit: ServiceTime, mbr: int,
                 slots: int, max_batches: int = 6):
        n = times.size
        a, b = fit.per_row_s, fit.per_batch_s
        r = np.ones(n, dtype=np.int64) if rows is None else rows
        cum = np.concatenate([[0], np.cumsum(r)])
        if rows is None:
            rowlim = np.arange(n) + max(mbr, 1)
        else:
            rowlim = np.searchsorted(cum, cum[:-1] + mbr, side="right") - 1
        rowlim = np.minimum(np.maximum(rowlim, np.arange(n) + 1), n)
        big = a * max(mbr, int(r.max())) + b
        alone = a * min(mbr, int(r.max())) + b
        worst = (min(slots, max_batches) * big + alone) * (1 + 1e-9)
        self.usable = bool(n) and worst <= float((budget * HEADROOM).min())
        t_ext = np.append(times, np.inf)
        # Alone and ended by the next arrival: one batch of one (most arrivals, found at once).
        alone1 = alone_end <= t_ext[1:]
        k_of = alone1.astype(np.int64)
        end = np.where(alone1, alone_end, np.inf)
        nxt = np.arange(n) + 1
        ok = budget > 0
        self.first_end = alone_end.copy()
        self.steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        act = np.flatnonzero(~alone1)
        o, s = act, start[act]
        prev: list[np.ndarray] = []     # ends of earlier batches, aligned with act
        for k in range(1, max_batches + 1 if self.usable else 1):
            m = np.minimum(np.searchsorted(times, s, side="left"), rowlim[o])
            m = np.maximum(m, o + 1)
            e = s + (a * (cum[m] - cum[o]) + b)
            okk = np.ones(act.size, dtype=bool)
            if prev:                    # free slots: batches in flight at the opener and
                ended0 = sum((p <= times[o]).astype(np.int64) for p in prev)   # first joiner
                okk &= (k - 1 - ended0) < slots
                j1 = np.minimum(o + 1, n - 1)
                ended1 = sum((p <= times[j1]).astype(np.int64) for p in prev)
                okk &= (m == o + 1) | ((k - ended1) < slots)
            elif slots < 2:
                okk &= m == o + 1
            self.steps.append((act, o, e))
            if k == 1:
                self.first_end[act] = e
            go = t_ext[m] < e
            done = ~go
            d = act[done]
            k_of[d], end[d], nxt[d] = k, e[done], m[done]
            ok[d] &= okk[done]
            ok[act[go]] &= okk[go]
            act, o, s = act[go], m[go], e[go]
            prev = [p[go] for p in prev] + [e[go]]
            if not act.size:
                break
        bad = np.concatenate([[0], np.cumsum(budget <= 0)])
        valid = ok & (k_of > 0) & (bad[nxt] == bad[:-1][np.arange(n)])
        self.start, self.k_of = start, k_of
        self.valid, self.end, self.nxt = valid, end, nxt
        # The chain from arrival 0 (busy periods follow each other; chains from elsewhere
        # soon meet it): `chain` its starts, `pos[j]` j's place on it or -1, `bad_at[p]` the
        # first place >= p whose busy period is not valid, `chain_end` their ends (rising).
        # Follow it over the busy periods that do not end at the next arrival only (the others,
        # nxt = j + 1, are on it whenever j is), by pointer doubling (`_path_from_first`).
        nt = np.flatnonzero(nxt != np.arange(1, n + 1))
        path = nt[_path_from_first(np.searchsorted(nt, nxt[nt]))]
        off = np.bincount(path + 1, minlength=n + 1)       # arrivals inside these busy
        off -= np.bincount(nxt[path], minlength=n + 1)     # periods are not on the chain
        self.chain = np.flatnonzero(np.cumsum(off[:-1]) == 0)
        self.pos = np.full(n, -1, dtype=np.int64)
        self.pos[self.chain] = np.arange(self.chain.size)
        idx = np.where(valid[self.chain], self.chain.size, np.arange(self.chain.size))
        self.bad_at = np.minimum.accumulate(idx[::-1])[::-1]
        self.chain_end = end[self.chain]

    def gather(self, J: np.ndarray, lat_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the batches of the busy periods started at `J`, batch by batch in
        order; sets each of their arrivals' batch end in `lat_end`."""
        kj = self.k_of[J]
        base = np.cumsum(kj) - kj
        total = int(kj.sum())
        fe = np.empty(total)
        fo = np.empty(total, dtype=np.int64)
        fs = np.empty(total)
        fe[base], fo[base], fs[base] = self.first_end[J], J, self.start[J]
        for k, (act, o, e) in enumerate(self.steps[1:], start=2):
            sel = kj >= k
            if not sel.any():
                break
            at = np.searchsorted(act, J[sel])
            pos = base[sel] + (k - 1)
            fe[pos], fo[pos] = e[at], o[at]
            fs[pos] = fe[pos - 1]
        upto = np.empty(total, dtype=np.int64)     # each batch's arrivals: fo .. upto - 1
        upto[:-1] = fo[1:]
        upto[base + kj - 1] = self.nxt[J]
        counts = upto - fo
        first = np.cumsum(counts) - counts
        idx = np.arange(int(counts.sum())) - np.repeat(first - fo, counts)
        lat_end[idx] = np.repeat(fe, counts)
        return fs, fe

    def gather_all(self, spans: list[tuple[int, int]], lat_end: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`gather` of the chain's busy periods p..q-1 for each (p, q) in `spans` (non-empty)
        at once: (starts, ends) of all of them, span after span, and the batches per span."""
        p, q = (np.array(x, dtype=np.int64) for x in zip(*spans, strict=True))
        lens = q - p
        J = self.chain[np.repeat(p - (np.cumsum(lens) - lens), lens) + np.arange(lens.sum())]
        fs, fe = self.gather(J, lat_end)
        return fs, fe, np.add.reduceat(self.k_of[J], np.cumsum(lens) - lens)

def _path_from_first(g: np.ndarray) -> np.ndarray:
    """The indices visited from 0 by x -> g[x] (g rising: g[x] > x, at most len(g) = the end),
    ascending: by pointer doubling, O(m log m) in numpy instead of a walk in Python. After
    round k `on` marks the first 2^k places of the walk and `jump` is g applied 2^k times."""
    m = g.size
    if not m:
        return np.zeros(0, dtype=np.int64)
    jump = np.append(g, m)                  # the end maps to itself
    on = np.zeros(m + 1, dtype=bool)
    on[0] = True
    while not on[m]:
        on[jump[np.flatnonzero(on)]] = True
        jump = jump[jump]
    return np.flatnonzero(on[:m])


__all__ = ["BusyPeriods"]
