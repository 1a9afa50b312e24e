"""decide() costs requests and the queue in padded tokens: a long text is not costed as a
short one (the same rows with row-only costs decide otherwise)."""

from __future__ import annotations

import pytest

from floodway.routers.decide import Action, ContainerView, Request, Snapshot, decide
from floodway.routers.service import ServiceTime

# 0.2 ms a token, 1 ms a row, 10 ms a batch.
TOK = ServiceTime(per_row_s=0.001, per_batch_s=0.01, per_token_s=0.0002)
SHORT, LONG = 7, 256   # a 5-word text, a 200-word one (estimated tokens)


def snap(*containers: ContainerView, **kw) -> Snapshot:
    base = dict(now_s=100.0, containers=containers, service=TOK, cold_start_s=1.0,
                max_batch_rows=32, max_queue=10, max_containers=4)
    return Snapshot(**{**base, **kw})


def busy(backlog_s: float, free: int = 1) -> ContainerView:
    return ContainerView("a", "ready" if free else "busy", free_slots=free, slots=2,
                         backlog_s=backlog_s)


def req(rows: int, row_tokens: int, budget_s: float = 0.5, **kw) -> Request:
    return Request(rows=rows, deadline_s=100.0 + budget_s, row_tokens=row_tokens, **kw)


def test_a_long_request_misses_the_budget_a_short_one_of_the_same_rows_meets():
    s = snap(busy(0.3))
    short = decide(s, req(16, SHORT))
    assert short.action == Action.DISPATCH      # 0.3 + 0.01 + 0.016 + 16*7*0.0002 = 0.35
    long = decide(s, req(16, LONG))
    # 16 x 256 padded tokens alone take 0.85 s: more than the 0.425 s planning budget.
    assert long.action == Action.SPILL_ASYNC
    assert "service time 0.845s" in long.reason
    # Costed by rows alone (the length unknown, no typical length), it would be dispatched.
    assert decide(s, req(16, 0)).action == Action.DISPATCH


def test_the_queue_ahead_is_costed_by_its_tokens():
    def wait(tokens: int, **kw) -> float:
        s = snap(busy(0.1, free=0), queued=2, queued_rows=8, queued_by_priority=(0, 2, 0),
                 queued_rows_by_priority=(0, 8, 0),
                 queued_tokens_by_priority=(0, tokens, 0), **kw)
        d = decide(s, req(1, SHORT, budget_s=5.0))
        assert d.action == Action.QUEUE
        return d.est_wait_s
    assert wait(8 * SHORT) == pytest.approx(0.1 + 0.0002 * 56 + 0.008 + 0.01)
    assert wait(8 * LONG) == pytest.approx(0.1 + 0.0002 * 2048 + 0.008 + 0.01)
    # A token budget of 1024 cuts those 2048 tokens into two batches: one more batch cost.
    assert wait(8 * LONG, max_batch_tokens=1024) == \
        pytest.approx(0.1 + 0.0002 * 2048 + 0.008 + 0.02)


def test_a_batch_holds_no_more_rows_than_the_token_budget_allows():
    s = snap(busy(0.0, free=0), max_batch_tokens=4096)
    d = decide(s, req(32, LONG, budget_s=60.0))
    # Alone it is one batch of 4096 // 256 = 16 rows, not 32: the wait is the container's.
    assert d.action == Action.QUEUE
    capped = decide(snap(busy(0.0, free=0)), req(32, LONG, budget_s=1.2))
    cut = decide(s, req(32, LONG, budget_s=1.2))
    assert capped.action == Action.SPILL_ASYNC     # 32 x 256 tokens: 1.68 s alone
    assert cut.action == Action.QUEUE              # 16 x 256 tokens: 0.85 s


def test_a_request_of_unknown_length_is_costed_at_the_typical_row():
    s = snap(busy(0.3), row_tokens=LONG)
    assert decide(s, req(16, 0)).action == Action.SPILL_ASYNC
    assert decide(s, req(16, SHORT)).action == Action.DISPATCH
