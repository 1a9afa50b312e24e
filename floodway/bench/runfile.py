"""What a bench run replayed, and against what: ``run.json`` beside its outputs, so that
`floodway simulate --bench-run DIR` replays the same requests through the simulator.

    write_run(path, **parameters) -> Path
    BenchRun.read(folder) -> BenchRun
    run.trace(max_seq_len) -> Trace             the requests sent, on the replay's clock
    run.sim_config(endpoint, service=..., ...) -> SimConfig

The JSON (format ``floodway.bench.run/1``): the app (``app``, and ``app_resolved``: its file's
absolute path, or null) or ``url``, and the endpoint; the trace as
given and resolved, ``start_s`` (trace seconds skipped), ``time_scale``, ``duration_s``;
the rows sent (``requests``, ``first_row``, ``last_row``); ``deadline_ms`` (every request's
X-Deadline-Ms); how items were made (``inputs``: kind, max_words, max_new_tokens); the
containers (``pinned``: ``--containers`` or null, ``at_start``: ready when the replay began,
``most_live``: the most live during it, ``cold_start_s``: the cold starts of those seen,
from /metrics); and the endpoint's config as the app
declared it (``route``, ``warm``, ``batching``, ``max_seq_len``).

The simulator's view of the run (`BenchRun.trace`, `BenchRun.sim_config`): the same trace
rows at the same scaled times (plan_requests again, so each request's text is the one sent),
each costing the tokens the router estimated for its text (`floodway.routers.tokens.
item_tokens`; the trace's `prompt_tokens` hold them less the special tokens, which
`floodway.sim.costs` adds back); the route with ``timeout_s`` = the run's deadline; the
containers: pinned -> that many, warm from the start, no buffer, at most the most live seen
(a local pool may spill to cold containers up to the machine's cores, which the app does
not say); else the endpoint's warm pool (no scheduled windows: they follow the wall clock,
not the trace's) starting with those ready at the start, capped at the most live seen; the
cold starts measured (`ColdStartModel`) unless `sim_config` is given another model than
the prior.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floodway.errors import FloodwayError

RUN_FORMAT = "floodway.bench.run/1"
RUN_FILE = "run.json"


def config_doc(ep: Any) -> dict[str, Any]:
    """An endpoint's route, warm pool and batching as JSON-able dicts, and its build's
    max_seq_len where it takes text (else None)."""
    from floodway.routers.tokens import TokenCost

    cost = TokenCost.of(ep)
    return {"route": dataclasses.asdict(ep.route), "warm": dataclasses.asdict(ep.warm),
            "batching": dataclasses.asdict(ep.batching),
            "max_seq_len": cost.max_seq_len if cost is not None else None}


def write_run(path: Path, **fields: Any) -> Path:
    """``run.json`` at `path`: `fields` (the module docstring's) under the format tag."""
    path.write_text(json.dumps({"format": RUN_FORMAT, **fields}, indent=1) + "\n")
    return path


@dataclass(frozen=True)
class BenchRun:
    """One bench run's ``run.json`` (`doc`) read from `folder`."""

    folder: Path
    doc: Mapping[str, Any]

    @classmethod
    def read(cls, folder: str | Path) -> BenchRun:
        """The run written to `folder` (or the run.json named). Raises FloodwayError naming
        the file when it is missing, not JSON or not a bench run."""
        p = Path(folder)
        f = p / RUN_FILE if p.is_dir() else p
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise FloodwayError(f"--bench-run {f}: cannot read it as JSON ({e}); give the "
                                "folder a `floodway bench` run wrote (--out)") from None
        if not isinstance(doc, Mapping) or doc.get("format") != RUN_FORMAT:
            got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise FloodwayError(f"--bench-run {f}: format must be {RUN_FORMAT!r}, got {got!r}")
        for key in ("trace", "time_scale", "deadline_ms", "requests", "inputs"):
            if key not in doc:
                raise FloodwayError(f"--bench-run {f}: no {key!r}")
        return cls(f.parent, doc)

    @classmethod
    def of_options(cls, bench_run: Path | None, trace: Path | None,
                   batch_times: Path | None) -> BenchRun | None:
        """`simulate`'s --bench-run (None without it). Raises FloodwayError when neither it
        nor --trace is given, or it is given with --trace or --batch-times, or the run saw
        no batches (no batch_times.json)."""
        if bench_run is None:
            if trace is None:
                raise FloodwayError("give --trace CSV, or --bench-run DIR (a floodway bench "
                                    "run's --out folder)")
            return None
        if trace is not None or batch_times is not None:
            raise FloodwayError("--bench-run gives the trace and the batch times: drop "
                                f"--{'trace' if trace is not None else 'batch-times'}")
        run = cls.read(bench_run)
        if not run.batch_times.is_file():
            raise FloodwayError(f"--bench-run {run.folder}: no batch_times.json (the run saw "
                                "no batches on the router's /metrics)")
        return run

    @property
    def batch_times(self) -> Path:
        """The run's batch_times.json (it may not exist: no batches seen)."""
        return self.folder / "batch_times.json"

    @property
    def deadline_s(self) -> float:
        return float(self.doc["deadline_ms"]) / 1000.0

    def trace_path(self) -> Path:
        """The trace replayed: as given if it is there, else as resolved then, else
        relative to the run's folder. Raises FloodwayError when none exists."""
        given = Path(self.doc["trace"])
        for p in (given, Path(self.doc.get("trace_resolved") or given), self.folder / given):
            if p.is_file():
                return p
        raise FloodwayError(f"the trace of bench run {self.folder} ({given}) is not there")

    def trace(self, max_seq_len: int | None):
        """The requests the run sent as a simulator `Trace` (module docstring). Raises
        FloodwayError when replanning does not give the requests the run sent."""
        import numpy as np

        from floodway.bench.plan import Inputs, plan_requests
        from floodway.routers.tokens import SPECIAL_TOKENS, item_tokens
        from floodway.sim.trace import Trace, read_trace

        d, src = self.doc, self.trace_path()
        full = read_trace(src)
        inp = d["inputs"]
        inputs = Inputs(inp.get("kind", "text"), inp.get("json_item"),
                        int(inp.get("max_words", 200)), inp.get("max_new_tokens"))
        plan = plan_requests(full, inputs, float(d["time_scale"]), d.get("duration_s"),
                             float(d.get("start_s") or 0.0))
        if len(plan) != int(d["requests"]) or plan[0].index != d.get("first_row", 0):
            raise FloodwayError(f"bench run {self.folder}: the trace {src} now gives "
                                f"{len(plan)} requests from row {plan[0].index}, the run sent "
                                f"{d['requests']} from row {d.get('first_row', 0)}")
        t0 = float(full.times_s[plan[0].index])
        times = np.asarray([t0 + p.send_s for p in plan], dtype=np.float64)
        tokens = None
        if max_seq_len and inputs.kind == "text":
            tokens = np.asarray([max(0, item_tokens(p.inputs[0], max_seq_len) - SPECIAL_TOKENS)
                                 for p in plan], dtype=np.int64)
        return Trace.from_times(times, name=f"{src.stem} (bench run)", prompt_tokens=tokens)

    def sim_config(self, endpoint: Any, **kw: Any):
        """`SimConfig` for `endpoint` (the app's, as `floodway.functions` loads it) as the
        run served it (module docstring), with `kw` (service, cold, seed, ...)."""
        from floodway.routers.tokens import TokenCost
        from floodway.sim import ColdStartModel, SimConfig

        d, warm = self.doc, endpoint.warm
        box = d.get("containers") or {}
        pinned, most = box.get("pinned"), box.get("most_live") or 0
        if pinned:
            warm = dataclasses.replace(warm, min_containers=int(pinned), buffer_containers=0,
                                       max_containers=max(int(pinned), int(most)),
                                       windows=(), predictive=False)
        elif most:
            start = min(int(box.get("at_start") or warm.min_containers), int(most))
            warm = dataclasses.replace(warm, min_containers=start, max_containers=int(most),
                                       windows=())
        route = dataclasses.replace(endpoint.route, timeout_s=self.deadline_s)
        if box.get("cold_start_s") and kw.get("cold") in (None, ColdStartModel()):
            kw["cold"] = ColdStartModel(tuple(box["cold_start_s"]))
        cost = TokenCost.of(endpoint)
        return SimConfig(route=route, warm=warm, batching=endpoint.batching,
                         max_seq_len=cost.max_seq_len if cost else None, **kw)


__all__ = ["RUN_FILE", "RUN_FORMAT", "BenchRun", "config_doc", "write_run"]
