"""The simulator with the service model a bench run measured (`batch_times.json`), batch
times by size, token costs, and the local router's pipe of 2 batches per container in every
path (event loop, dispatch test, bulk kernel)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.errors import FloodwayError
from floodway.routers.decide import Action
from floodway.routers.service import ServiceTime
from floodway.sim import SimConfig, Trace, simulate
from floodway.sim.costs import request_tokens
from floodway.sim.engine import Simulator
from floodway.sim.model import BATCH_TIMES_FORMAT, ServiceModel
from tests.unit.sim.cases import assert_same, code

ONE = WarmPool(min_containers=1, max_containers=1, scaledown_window_s=600)


def _doc(**fit) -> dict:
    return {"format": BATCH_TIMES_FORMAT, "endpoint": "embed",
            "batches": [{"rows": 1, "seconds": 0.5}],
            "by_rows": [{"rows": 1, "batches": 3, "mean_s": 0.5, "p50_s": 0.5, "max_s": 0.6}],
            "intervals": [], "fit": {"per_batch_s": 0.02, "per_row_s": 0.005, **fit}}


def test_batch_times_give_the_fit_and_the_times_by_size(tmp_path) -> None:
    m = ServiceModel.from_batch_times(_doc())
    assert m.fit == ServiceTime(0.005, 0.02) and m.by_rows == ((1, 0.5),) and m.sized
    assert m.batch_s(1, 0.025) == 0.5 and m.batch_s(3, 0.035) == 0.035
    # A per-token term explains the spread of sizes: the fit then times every batch.
    tok = ServiceModel.from_batch_times(_doc(per_token_s=0.001))
    assert tok.fit.per_token_s == 0.001 and not tok.sized and tok.batch_s(1, 0.7) == 0.7
    p = tmp_path / "batch_times.json"
    p.write_text(json.dumps(_doc()))
    assert ServiceModel.read_batch_times(p) == m
    for bad, needle in [({**_doc(), "format": "x"}, "format must be"),
                        ({**_doc(), "fit": None}, "fit: no fitted"),
                        ({**_doc(), "fit": {"per_row_s": -1}}, "each term must be in"),
                        ({**_doc(), "by_rows": [{"rows": 0, "mean_s": 1}]}, "rows >= 1")]:
        with pytest.raises(FloodwayError, match=needle):
            ServiceModel.from_batch_times(bad)
    p.write_text("{not json")
    with pytest.raises(FloodwayError, match="cannot read it as JSON"):
        ServiceModel.read_batch_times(p)


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_of_a_measured_size_runs_its_measured_time(fast: bool) -> None:
    # One request every 20 s: each runs alone, a batch of one row after the batcher's wait.
    tr = Trace.from_times(np.arange(0.0, 600.0, 20.0), minutes=10)
    cfg = dict(route=Route(timeout_s=5.0), warm=ONE, batching=Batching(wait_ms=10), fast=fast)
    flat = simulate(tr, **cfg, service=ServiceModel(ServiceTime(0.005, 0.02)))
    sized = simulate(tr, **cfg, service=ServiceModel.from_batch_times(_doc()))
    assert flat.p50_s == pytest.approx(0.01 + 0.025)
    assert sized.p50_s == pytest.approx(0.01 + 0.5) and sized.served == tr.requests


def test_batch_times_by_size_give_the_same_result_in_both_modes() -> None:
    rng = np.random.default_rng(3)
    tr = Trace.from_times(np.sort(rng.uniform(0, 60, 3000)), minutes=1)
    by = tuple((r, 0.05 + 0.03 * r) for r in range(1, 9))     # slower than the fit says
    cfg = dict(route=Route(timeout_s=0.5, max_queue=16), warm=ONE,
               batching=Batching(max_batch_rows=8, wait_ms=5),
               service=ServiceModel(ServiceTime(0.004, 0.02), by_rows=by))
    fast, slow = simulate(tr, **cfg), simulate(tr, **cfg, fast=False)
    assert_same(fast, slow)
    # Loaded past what it serves: some waited in the queue, some were turned away.
    assert fast.queued > 0 and fast.served < tr.requests


@pytest.mark.parametrize("fast", [True, False])
def test_a_container_pipes_two_batches_even_when_the_route_allows_eight(fast: bool) -> None:
    # Six one-row requests at once on one container, a batch of one row each and a long
    # batch time: the local router keeps 2 batches in its pipe and queues the rest; every
    # path (the bulk kernel, the dispatch test, decide) must count 2 slots, not 8.
    tr = Trace.from_times(np.zeros(6), minutes=1)
    cfg = SimConfig(route=Route(max_inflight_per_container=8, max_queue=100, timeout_s=30.0,
                                spill=()), warm=ONE, batching=Batching(max_batch_rows=1),
                    service=ServiceModel.of(1.0), fast=fast)
    sim = Simulator(tr, cfg)
    sim.setup()
    assert sim.slots == 2 and (not fast or sim.seg.slots == 2)
    res = simulate(tr, cfg)
    assert res.dispatched == 2 and res.queued == 4 and res.served == 6
    assert res.p99_s > 5.0                          # six batches of 1 s, one after another


def _llm_trace(tokens: list[int], gap_s: float) -> Trace:
    t = np.arange(len(tokens)) * gap_s
    tok = np.asarray(tokens, dtype=np.int64)
    return Trace.from_times(t, minutes=1, prompt_tokens=tok, generated_tokens=tok)


def test_requests_cost_their_tokens_only_with_a_per_token_term_and_text() -> None:
    tr = _llm_trace([10, 5000, 0], 1.0)
    per_token = ServiceTime(0.0, 0.01, 0.001)
    assert request_tokens(tr, 512, per_token).tolist() == [12, 512, 2]     # + [CLS] [SEP]
    assert request_tokens(tr, None, per_token) is None                     # not text
    assert request_tokens(tr, 512, ServiceTime(0.0, 0.01)) is None         # no token term
    no_tokens = Trace.from_times([0.0, 1.0], minutes=1)
    assert request_tokens(no_tokens, 512, per_token) is None


def test_decide_and_the_batches_see_token_costs() -> None:
    # A 500-token request takes 0.5 s; a second one 0.1 s later would wait for it and then
    # take 0.5 s itself: past its 0.9 s deadline, so decide spills it to async. Counted by
    # rows, both take 10 ms and both are dispatched.
    tr = _llm_trace([498, 498, 8], 0.1)
    svc = ServiceModel(ServiceTime(0.0, 0.01, 0.001))
    cfg = dict(route=Route(timeout_s=0.9, spill=("async",)), warm=ONE,
               batching=Batching(wait_ms=0), service=svc)
    rows = simulate(tr, **cfg)
    tokens = simulate(tr, **cfg, max_seq_len=512)
    assert rows.decisions.tolist() == [code(Action.DISPATCH)] * 3
    assert tokens.decisions.tolist()[:2] == [code(Action.DISPATCH), code(Action.SPILL_ASYNC)]
    assert tokens.p99_s > 0.49 > rows.p99_s
    # Checked against decide() on every arrival: the same result.
    assert_same(tokens, simulate(tr, **cfg, max_seq_len=512, fast=False))
