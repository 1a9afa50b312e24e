"""A streaming endpoint's sequences as the Modal router's snapshot sees them, offline: dealt
over the runners, in Modal's backlog, and priced by what each has left."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from floodway.config import Generation
from floodway.modal.router.sequences import modal_book


def _seq(book, sid, prompt_chars, max_new, tokens=0, chunks=0, started=True):
    from floodway.modal.router.sequences import FIFO, ModalSequence

    seq = ModalSequence(sid, book.cost({"prompt": "x" * prompt_chars,
                                        "max_new_tokens": max_new}), "t")
    if started:
        book.sent(seq, None, 0.0)
        seq.tokens, seq.chunks = tokens, chunks
    else:
        book.queued(seq, FIFO)
    return seq


def test_running_sequences_are_itemized_over_the_runners():
    """The running sequences are dealt out over the runners as the sequences in flight
    are (the first ones one more), each with its streamed and remaining tokens and, before
    its first chunk, its prompt as not yet prefilled."""
    from floodway.modal.router.sequences import runner_sequence_loads

    book = modal_book(SimpleNamespace(generation=Generation(max_new_tokens=64)),
                      SimpleNamespace(generation=None, inflight_rows=0, runners=1))
    running = [_seq(book, "1:0", 400, 40, tokens=30, chunks=3),
               _seq(book, "1:1", 40, 64, tokens=5, chunks=5),
               _seq(book, "2:0", 800, 20)]
    loads = runner_sequence_loads(2, 5, list(book.running.values()), 8)
    assert [ld.active for ld in loads] == [3, 2]
    assert [ld.generated_tokens for ld in loads] == [(30, 0), (5,)]
    assert [ld.remaining_tokens for ld in loads] == [(10, 20), (59,)]
    assert [ld.pending_prompt_tokens for ld in loads] == [running[2].cost.prompt_tokens, 0]
    # More itemized than the in-flight share (a stale count): never fewer active than that.
    assert [ld.active for ld in runner_sequence_loads(2, 1, running, 8)] == [2, 1]
    assert runner_sequence_loads(0, 3, running, 8) == []


def test_modals_backlog_carries_the_prompts_the_router_sent():
    from floodway.modal.router.sequences import backlog_queue

    book = modal_book(SimpleNamespace(generation=Generation(max_new_tokens=64)),
                      SimpleNamespace(generation=None, inflight_rows=0, runners=1))
    waiting = [_seq(book, f"3:{i}", 400 * (i + 1), 32, started=False) for i in range(2)]
    prompts = sum(s.cost.prompt_tokens for s in waiting)
    # All of ours in the backlog, and one input of another router's: its prompt unknown.
    q = backlog_queue(3, book.queue(), 64, {"t": 1})
    assert q.ahead(0) == (3, prompts, 32 * 2 + 64) and q.tenant_sequences == {"t": 1}
    # Fewer in the backlog than ours waiting (the rest on their way to a container).
    assert backlog_queue(1, book.queue(), 64, {}).ahead(0) == (1, round(prompts / 2), 32)
    assert backlog_queue(2, None, 64, {}).ahead(0) == (2, 0, 128)


def test_the_snapshot_counts_a_running_sequence_by_what_it_has_left():
    """With the priors (nothing measured: each sequence runs to its max_new_tokens), a
    sequence that streamed 60 of 64 tokens ends after 4 more steps, not 64."""
    from floodway.core.generation import GenerationModel
    from floodway.modal.router.sequences import modal_stream_snapshot

    ep = SimpleNamespace(generation=Generation(max_sequences=4, max_new_tokens=64),
                         route=SimpleNamespace(max_queue=16, spill=("cold",)),
                         warm=SimpleNamespace(container_cap=2))
    book = modal_book(ep, SimpleNamespace(generation=None, inflight_rows=1, runners=1))
    _seq(book, "4:0", 40, 64, tokens=60, chunks=60)
    _seq(book, "5:0", 400, 64, started=False)
    model = GenerationModel()
    args = dict(runners=1, inflight=2, asked_for_s=[], backlog=1, tenants={}, model=model,
                cold_start_s=30.0)
    known = modal_stream_snapshot(0.0, ep, book=book, **args)
    blind = modal_stream_snapshot(0.0, ep, **args)
    step = model.step_s(2)
    [c] = known.containers
    assert c.active == 2 and c.ends_in_s == pytest.approx((4 * step, 64 * step))
    assert blind.containers[0].ends_in_s == pytest.approx((64 * step, 64 * step))
    assert known.queue.ahead(0) == (1, 100, 64) and blind.queue.ahead(0) == (1, 0, 64)
