"""bench's PNG: latency per request and outcomes per second over the replay, each under
the arrival rate (matplotlib, Agg; imported when called, so the package does not need it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from floodway.bench.outcomes import LABELS, OUTCOMES, arrivals_per_second

COLORS = {"ok": "tab:green", "late": "tab:olive", "async": "tab:blue", "429": "tab:purple",
          "503": "tab:orange", "504": "tab:red", "other": "black"}


def plot_bench(send_s: Sequence[float], latency_s: Sequence[float], outcomes: Sequence[str],
               deadline_s: float, path: str | Path, title: str = "floodway bench") -> Path:
    """Write a two-panel PNG to `path` and return it: top, each request's latency (ms, log
    scale) at its send time, colored by outcome, with the deadline; bottom, requests per
    outcome per second of sending, stacked; both with arrivals per second (gray, right
    axis). Raises ValueError when the sequences differ in length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not len(send_s) == len(latency_s) == len(outcomes):
        raise ValueError("send_s, latency_s and outcomes must be of one length")
    rate = arrivals_per_second(send_s)
    secs = list(range(len(rate)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for o in OUTCOMES:
        pts = [(t, x * 1000) for t, x, k in zip(send_s, latency_s, outcomes, strict=True)
               if k == o and x == x]                     # x == x: not NaN
        if pts:
            top.scatter(*zip(*pts, strict=True), s=6, c=COLORS[o], alpha=0.7,
                        label=f"{LABELS[o]} ({len(pts)})")
    top.axhline(deadline_s * 1000, color="gray", ls="--", lw=0.8, label="deadline")
    top.set_yscale("log")
    top.set_ylabel("latency (ms)")
    fig.suptitle(title, fontsize=10)
    # Legends above the axes: the points and bars may be anywhere inside them.
    top.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, fontsize=8, frameon=False)
    below = [0] * len(secs)
    for o in OUTCOMES:
        per = [0] * len(secs)
        for t, k in zip(send_s, outcomes, strict=True):
            if k == o:
                per[max(0, int(t))] += 1
        if any(per):
            bottom.bar(secs, per, bottom=below, width=1.0, align="edge", color=COLORS[o],
                       label=LABELS[o])
            below = [a + b for a, b in zip(below, per, strict=True)]
    bottom.set_ylabel("requests / s by outcome")
    bottom.set_xlabel("send time (s from the replay's start)")
    bottom.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, fontsize=8,
                  frameon=False)
    for ax in (top, bottom):
        twin = ax.twinx()       # the last second drawn to its end
        twin.step([*secs, len(secs)], [*rate, rate[-1]], where="post", color="gray",
                  alpha=0.6)
        twin.set_ylabel("arrivals / s")
        twin.set_ylim(bottom=0)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["plot_bench"]
