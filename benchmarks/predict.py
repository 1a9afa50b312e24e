"""Predict: does `floodway simulate` predict what the local runtime does?

One `floodway bench` run of the example embedding app (modal_app.py's `embed`, the real
all-MiniLM-L6-v2 model that benchmarks/burst.py serves) replays a slice of the Azure LLM
code trace (Microsoft Azure, Azure Public Dataset, CC-BY-4.0) open loop against a local
`floodway serve`; then the simulator replays the same requests with what that run measured
and recorded (`floodway simulate modal_app.py --bench-run OUT`: the same trace rows at the
same time scale, each costing the tokens the router estimated for its text, the run's
deadline and containers, the batch times it measured and their fit on padded tokens, rows
and batches, with its contention and load terms). Printed side by side: the share of
requests served (200), made async jobs
(202: spilled, or handed off near their deadline) and shed (429/503), anything else, and
the served requests' latency p50 / p99 (nearest rank), for the run and for the
prediction, with the differences and PASS/FAIL against the targets: each share within
`SHARE_POINTS` (5) percentage points, the served p99 within `P99_REL` (20 %). The run's
latencies are shown twice: as the client saw them (send to answer) and as the router
timed them (its Server-Timing: arrival to answer, what the simulator models); on a loaded
machine the two differ by the time spent in the client's and the router's event loops.

The slice: `--start-s` trace seconds after its first arrival (default 840: minutes 14-15,
its busiest stretch), `--duration-s` of replay at `--time-scale`. Each request is one text
of about ContextTokens tokens, at most `--max-words` words (40 by default, about 50 tokens:
an embedding request; at 200 words a 16-row batch of 256-token texts takes seconds on
2 CPU cores). The pool is pinned to `--containers` (default 2, what a 2-core machine runs
locally), so that warm-pool decisions, which follow the wall clock, are not part of the
comparison. The runtime's numbers are one run on a shared machine: other work changes the
batch times between and within runs (the bench measures them during the run, which is why
the simulator takes them from it).

    .venv/bin/python benchmarks/predict.py [--trace PATH] [--start-s 840]
        [--duration-s 30] [--time-scale 1] [--max-words 40] [--deadline-ms MS]
        [--containers 2] [--out benchmarks/out/predict] [--reuse] [--store DIR]
        [--follow-batches 0] [--runs 1]

`--reuse` skips the bench run and predicts the one already in `--out`. `--runs N` benches
the same replay N times (in `--out`/run1 ... runN) and predicts each: a run on a shared
machine is one draw (the served p99 of one replay moved by up to 1.8x between runs of the
same build), so it also prints the runtime's own spread and the median prediction against
the median run. Needs a build of modal_app.py (`make run`, or `floodway build
modal_app.py`).
"""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
APP = "modal_app.py"
SHARE_POINTS = 5.0
P99_REL = 0.20
GROUPS = {"served": ("ok", "late"), "async": ("async",), "shed": ("429", "503"),
          "other": ("504", "other")}


@dataclass(frozen=True)
class Split:
    """Requests per outcome group (`GROUPS`) and the served ones' latencies (seconds)."""

    counts: dict[str, int]
    latencies_s: list[float]
    router_s: list[float] | None = None

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    def share(self, group: str) -> float:
        """Percent of the requests in `group`."""
        return 100.0 * self.counts[group] / max(1, self.requests)

    def p(self, q: float, router: bool = False) -> float:
        """The served requests' latency percentile `q` (seconds); `router`: the router's own
        time (Server-Timing) where measured, as the client saw it otherwise."""
        from floodway.bench.outcomes import percentile

        return percentile(self.router_s if router and self.router_s else self.latencies_s, q)


def measured(out: Path) -> Split:
    """The bench run's split, from its requests.csv."""
    counts = dict.fromkeys(GROUPS, 0)
    lat: list[float] = []
    router: list[float] = []
    with (out / "requests.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            group = next(g for g, outs in GROUPS.items() if row["outcome"] in outs or
                         g == "other")
            counts[group] += 1
            if group == "served":
                lat.append(float(row["latency_s"]))
                if row.get("router_s"):
                    router.append(float(row["router_s"]))
    return Split(counts, lat, router if len(router) == len(lat) else None)


def predicted(out: Path, seed: int, follow_batches: int = 0):
    """The simulator's split of the run in `out` (`floodway simulate --bench-run`'s
    computation), and its SimResult; `follow_batches` > 0: the simulated router re-fits its
    estimate on that many recent batches (`ServiceModel.follow_batches`)."""
    import dataclasses

    from floodway.bench.runfile import BenchRun
    from floodway.functions.discover import load_app
    from floodway.routers.tokens import TokenCost
    from floodway.sim import ServiceModel, simulate

    run = BenchRun.of_options(out, None, None)
    os.environ.setdefault("FLOODWAY_NO_MODAL", "1")
    _, eps = load_app(f"{run.doc['app']}::{run.doc['endpoint']}")
    ep = eps[0]
    text = TokenCost.of(ep)
    tr = run.trace(text and text.max_seq_len)
    service = dataclasses.replace(ServiceModel.read_batch_times(run.batch_times),
                                  follow_batches=follow_batches)
    res = simulate(tr, run.sim_config(ep, service=service, seed=seed))
    lat = [float(x) for x in res.latencies_s if not math.isnan(x)]
    counts = {"served": res.served, "async": res.async_jobs, "shed": res.shed,
              "other": res.expired}
    return Split(counts, lat), res


def compare(run: Split, pred: Split) -> tuple[Table, bool]:
    """The side-by-side table and whether every target was met."""
    table = Table(title=f"floodway bench vs floodway simulate ({run.requests:,} requests)")
    for col in ("measure", "run", "predicted", "difference", "target", "verdict"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    ok = True
    for g in GROUPS:
        d = pred.share(g) - run.share(g)
        good = abs(d) <= SHARE_POINTS
        ok &= good
        table.add_row(f"{g} %", f"{run.share(g):.1f} ({run.counts[g]:,})",
                      f"{pred.share(g):.1f} ({pred.counts[g]:,})", f"{d:+.1f} pt",
                      f"+-{SHARE_POINTS:g} pt", "PASS" if good else "FAIL")
    views = [("client", False)] + ([("router", True)] if run.router_s else [])
    for view, router in views:
        for q in (50, 99):
            r, p = run.p(q, router), pred.p(q)
            rel = (p - r) / r if r > 0 and not math.isnan(p) else math.nan
            good = q != 99 or abs(rel) <= P99_REL
            if q == 99:
                ok &= good
            table.add_row(f"served p{q} (ms, {view})", _ms(r), _ms(p),
                          "-" if math.isnan(rel) else f"{rel:+.0%}",
                          f"+-{P99_REL:.0%}" if q == 99 else "-",
                          ("PASS" if good else "FAIL") if q == 99 else "-")
    return table, ok


def res_contention(out: Path) -> str:
    """The run's contention factors as text ("" where batch_times.json has none)."""
    import json

    whole = json.loads((out / "batch_times.json").read_text())
    doc, ld = whole.get("contention") or {}, whole.get("load")
    text = ", ".join(f"{c['busy']} busy x{c['factor']:.2f}" for c in doc.get("by_busy", ()))
    return text + (f"; load: router + client {ld['other_cores']:.2f} cores + "
                   f"{ld['other_per_request_s'] * 1000:.2f} ms per request, x{ld['at_rest']:.2f}"
                   " / share" if ld and "cores" in ld else "")


def disturbance(out: Path) -> str:
    """Whether other work on the machine took cores from the run (batch_times.json's
    ``foreign``): what no prediction from the trace can know of."""
    import json

    from floodway.bench.contention import disturbed_text

    fo = json.loads((out / "batch_times.json").read_text()).get("foreign")
    if not fo:
        return "other work on the machine: not measured"
    if not fo["disturbed_s"]:
        return (f"other work on the machine: at most {fo['most_cores']:.2f} cores in any "
                f"interval (disturbed over {fo['over_cores']:g}): an undisturbed run")
    return (f"other work on the machine took up to {fo['most_cores']:.2f} cores during "
            f"{disturbed_text(fo)}: the run there is not the app's alone, and no "
            "prediction from the trace can know of it")


def repeated(console: Console, outs: list[Path], seed: int, follow_batches: int) -> bool:
    """Each bench run in `outs` (of one replay) beside its prediction, then the runtime's
    own spread of the served p99 (router's view) over the runs. True when every run's
    shares are within `SHARE_POINTS` and the median prediction is within `P99_REL` of the
    median run."""
    import json
    import statistics

    table = Table(title=f"{len(outs)} runs of one replay, each predicted")
    for col in ("run", "served %: run / predicted", "p99 ms: run / predicted",
                "difference", "other work (most cores)"):
        table.add_column(col, justify="left" if col == "run" else "right")
    shares_ok, got, want, within = True, [], [], 0
    for o in outs:
        run, (pred, _) = measured(o), predicted(o, seed, follow_batches)
        shares_ok &= all(abs(pred.share(g) - run.share(g)) <= SHARE_POINTS for g in GROUPS)
        r, p = run.p(99, router=True), pred.p(99)
        got.append(r)
        want.append(p)
        within += abs(p - r) <= P99_REL * r
        fo = json.loads((o / "batch_times.json").read_text()).get("foreign")
        table.add_row(o.name, f"{run.share('served'):.1f} / {pred.share('served'):.1f}",
                      f"{_ms(r)} / {_ms(p)}", f"{(p - r) / r:+.0%}",
                      "-" if not fo else f"{fo['most_cores']:.2f}" +
                      (" disturbed" if fo["disturbed_s"] else ""))
    console.print(table)
    mid_run, mid_pred = statistics.median(got), statistics.median(want)
    rel = (mid_pred - mid_run) / mid_run
    console.print(f"the runtime's own served p99 over the {len(got)} runs: {_ms(min(got))} / "
                  f"{_ms(mid_run)} / {_ms(max(got))} ms (min / median / max; max / min "
                  f"{max(got) / min(got):.2f}x)")
    console.print(f"predicted: median {_ms(mid_pred)} ms, {rel:+.0%} from the median run "
                  f"({'PASS' if abs(rel) <= P99_REL else 'FAIL'}, +-{P99_REL:.0%}); within "
                  f"{P99_REL:.0%} of its own run in {within} of {len(got)}; shares within "
                  f"{SHARE_POINTS:g} pt in {'every run' if shares_ok else 'not every run'}")
    return shares_ok and abs(rel) <= P99_REL


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:,.0f}"


def bench(out: Path, trace: Path, start_s: float, duration_s: float, time_scale: float,
          max_words: int, deadline_ms: float | None, containers: int, store: Path | None
          ) -> None:
    """`floodway bench` of the app, its output in `out` (raises CalledProcessError)."""
    cmd = [sys.executable, "-m", "floodway.cli", "bench", APP, "--trace",
           os.path.relpath(trace, ROOT), "--start-s", f"{start_s:g}",
           "--duration-s", f"{duration_s:g}", "--time-scale", f"{time_scale:g}",
           "--max-words", str(max_words), "--containers", str(containers), "--out", str(out)]
    if deadline_ms is not None:
        cmd += ["--deadline-ms", f"{deadline_ms:g}"]
    if store is not None:
        cmd += ["--store", str(store)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def main(trace: Annotated[Path, typer.Option(help="a per-request trace (CSV)")]
         = DEFAULT_TRACE,
         start_s: Annotated[float, typer.Option(help="trace seconds skipped")] = 840.0,
         duration_s: Annotated[float, typer.Option(min=1, help="replay seconds")] = 30.0,
         time_scale: Annotated[float, typer.Option(help="replay speed")] = 1.0,
         max_words: Annotated[int, typer.Option(min=1, help="longest text sent")] = 40,
         deadline_ms: Annotated[float | None, typer.Option(
             help="every request's deadline (default: the app's Route.timeout_s)")] = None,
         containers: Annotated[int, typer.Option(min=1, help="containers served")] = 2,
         out: Annotated[Path, typer.Option(help="the bench run's folder")]
         = ROOT / "benchmarks" / "out" / "predict",
         reuse: Annotated[bool, typer.Option(help="predict the run already in --out")]
         = False,
         seed: Annotated[int, typer.Option(help="the simulator's seed")] = 0,
         follow_batches: Annotated[int, typer.Option(
             min=0, help="the simulated router re-fits on this many recent batches "
             "(0: plans with the run's fit)")] = 0,
         store: Annotated[Path | None, typer.Option(help="artifact store root")] = None,
         runs: Annotated[int, typer.Option(
             min=1, help="bench runs of the same replay (in --out/run1 ...), each predicted, "
             "with the runtime's own spread")] = 1,
         ) -> None:
    console = Console(width=120)
    if runs > 1:
        outs = [out / f"run{k}" for k in range(1, runs + 1)]
        for o in outs if not reuse else ():
            bench(o, trace, start_s, duration_s, time_scale, max_words, deadline_ms,
                  containers, store)
        raise typer.Exit(0 if repeated(console, outs, seed, follow_batches) else 1)
    if not reuse:
        bench(out, trace, start_s, duration_s, time_scale, max_words, deadline_ms,
              containers, store)
    run = measured(out)
    pred, res = predicted(out, seed, follow_batches)
    table, ok = compare(run, pred)
    console.print(table)
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    console.print(f"the same prediction from the command line: floodway simulate {APP} "
                  f"--bench-run {shown}")
    console.print(f"simulated: {res.handed_off:,} handed off near the deadline, "
                  f"{res.spill_async:,} spilled to async, {res.queued:,} queued, "
                  f"{res.containers_started} containers started")
    con = res_contention(out)
    if con:
        console.print(f"contention (batch time / fit by busy containers): {con}")
    console.print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    console.print(disturbance(out))
    raise typer.Exit(0 if ok else 1)


if __name__ == "__main__":
    typer.run(main)
