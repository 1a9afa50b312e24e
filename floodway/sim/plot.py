"""The simulator's PNG: arrivals per minute, and containers warm and busy over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from floodway.sim.result import SimResult


def plot_result(result: SimResult, path: str | Path, title: str = "floodway simulate") -> Path:
    """Write a two-panel PNG of `result` to `path` (matplotlib, Agg; imported here so that the
    package does not need it) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(result.arrivals.size) / 60.0  # hours since the trace's first minute
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1.3]})
    top.step(x, result.arrivals, where="post", color="tab:gray", lw=0.8)
    top.set_ylabel("arrivals / min")
    top.set_title(f"{title}: cold starts {result.cold_start_rate:.2%}, p99 "
                  f"{result.p99_s:.2f} s, idle {result.idle_min:,.0f} container-min, "
                  f"${result.cost_usd:,.2f}", fontsize=10)
    bottom.step(x, result.warm_avg, where="post", color="tab:blue", lw=1.0, label="warm")
    bottom.fill_between(x, result.busy_avg, step="post", color="tab:orange", alpha=0.6,
                        label="busy")
    bottom.set_ylabel("containers (mean in minute)")
    bottom.set_xlabel("hours since the first minute of the trace")
    bottom.legend(loc="upper right")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["plot_result"]
