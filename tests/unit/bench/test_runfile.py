"""run.json: what a bench run replayed, read back as the simulator's trace and config (the
same rows at the same scaled times, the router's token estimates, the run's deadline and
containers), a replay that starts into the trace, and simulate's --bench-run options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from floodway.bench.plan import Inputs, plan_requests, text_of
from floodway.bench.runfile import RUN_FORMAT, BenchRun, write_run
from floodway.config import Batching, Build, Route, WarmPool
from floodway.errors import FloodwayError
from floodway.routers.tokens import item_tokens
from floodway.sim import ColdStartModel, ServiceModel
from floodway.sim.trace import Trace

CSV = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"{1.7e9 + t:.3f},{c},1\n" for t, c in
    [(0.0, 5), (1.0, 40), (2.0, 400), (3.0, 12), (4.0, 90), (6.0, 7), (9.0, 300)])


class _Endpoint:
    """What the run's reader takes of an endpoint (`floodway.functions.Endpoint`)."""

    input_type = str
    route = Route(timeout_s=2.0, max_queue=64)
    warm = WarmPool(min_containers=1, buffer_containers=1, max_containers=8)
    batching = Batching(max_batch_rows=32, wait_ms=5)
    build = Build(max_seq_len=64)


def _run(tmp_path: Path, **over) -> BenchRun:
    trace = tmp_path / "t.csv"
    trace.write_text(CSV)
    fields = dict(app="app.py", url=None, endpoint="embed", trace=str(trace),
                  trace_resolved=str(trace), start_s=1.5, time_scale=2.0, duration_s=3.0,
                  requests=4, first_row=2, last_row=5, deadline_ms=800.0,
                  inputs={"kind": "text", "json_item": None, "max_words": 30,
                          "max_new_tokens": None},
                  containers={"pinned": 2, "at_start": 2, "most_live": 2,
                              "cold_start_s": [0.4, 0.6]})
    fields.update(over)
    write_run(tmp_path / "run.json", **fields)
    return BenchRun.read(tmp_path)


def test_a_replay_starts_into_the_trace_and_names_its_rows():
    tr = Trace.from_times(np.array([0.0, 1.0, 2.0, 4.0, 8.0]) + 1.7e9)
    plan = plan_requests(tr, Inputs(), time_scale=2.0, start_s=1.5)
    assert [p.index for p in plan] == [2, 3, 4]
    assert [p.send_s for p in plan] == pytest.approx([0.0, 1.0, 3.0])
    assert plan[0].inputs[0].startswith("#2 ")
    with pytest.raises(FloodwayError, match="--start-s"):
        plan_requests(tr, Inputs(), start_s=9.0)
    with pytest.raises(FloodwayError, match="--start-s"):
        plan_requests(tr, Inputs(), start_s=-1.0)


def test_the_simulators_trace_is_what_the_run_sent(tmp_path):
    run = _run(tmp_path)
    tr = run.trace(64)
    # rows 2..5 (trace seconds 2, 3, 4, 6), sent at (t - 2) / 2 s
    assert tr.requests == 4
    assert tr.times_s - tr.times_s[0] == pytest.approx([0.0, 0.5, 1.0, 2.0])
    # each costs the router's estimate of the text sent (less the special tokens, which
    # the simulator's costs add back), at most max_seq_len
    sent = [text_of(i, c, 30) for i, c in [(2, 400), (3, 12), (4, 90), (5, 7)]]
    assert list(tr.prompt_tokens + 2) == [item_tokens(t, 64) for t in sent]
    assert tr.prompt_tokens[0] + 2 == 41 < 64            # 30 words of the 400 tokens
    assert run.trace(32).prompt_tokens[0] + 2 == 32      # at most max_seq_len
    assert run.trace(None).prompt_tokens is None        # not text: rows alone


def test_a_trace_that_no_longer_gives_the_runs_requests_is_refused(tmp_path):
    run = _run(tmp_path, requests=5)
    with pytest.raises(FloodwayError, match="the run sent 5"):
        run.trace(64)


def test_the_config_is_the_runs_deadline_containers_and_cold_starts(tmp_path):
    run = _run(tmp_path)
    svc = ServiceModel.of(0.05)
    cfg = run.sim_config(_Endpoint(), service=svc, seed=3)
    assert cfg.route.timeout_s == 0.8 and cfg.route.max_queue == 64
    assert (cfg.warm.min_containers, cfg.warm.max_containers, cfg.warm.buffer_containers) \
        == (2, 2, 0)
    assert cfg.cold.samples_s == (0.4, 0.6) and cfg.service is svc and cfg.seed == 3
    assert cfg.max_seq_len == 64 and cfg.batching.max_batch_rows == 32
    given = run.sim_config(_Endpoint(), service=svc, cold=ColdStartModel.of(5.0))
    assert given.cold.samples_s == (5.0,)               # a model given wins
    # not pinned: the endpoint's pool, from those ready at the start, capped at the most
    # live the run saw
    free = _run(tmp_path, containers={"pinned": None, "at_start": 1, "most_live": 2})
    w = free.sim_config(_Endpoint(), service=svc).warm
    assert (w.min_containers, w.max_containers, w.buffer_containers) == (1, 2, 1)


def test_simulates_options(tmp_path):
    with pytest.raises(FloodwayError, match="--trace CSV, or --bench-run"):
        BenchRun.of_options(None, None, None)
    assert BenchRun.of_options(None, tmp_path / "t.csv", None) is None
    run = _run(tmp_path)
    with pytest.raises(FloodwayError, match="drop --trace"):
        BenchRun.of_options(tmp_path, tmp_path / "t.csv", None)
    with pytest.raises(FloodwayError, match="no batch_times.json"):
        BenchRun.of_options(tmp_path, None, None)
    run.batch_times.write_text("{}")
    assert BenchRun.of_options(tmp_path, None, None).doc["requests"] == 4
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(FloodwayError, match=RUN_FORMAT):
        BenchRun.read(tmp_path / "bad")
    with pytest.raises(FloodwayError, match="cannot read it"):
        BenchRun.read(tmp_path / "missing")
