"""The router's side of streams on Modal, offline: its measurements (`modal_book` through
`stream_pending`: the same samples as the local pool's, from the chunks as they arrive, with
the sequences in flight per runner as a step's active count), item errors, the stream's
deadlines and its sequences in the book."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from floodway.config import Generation
from floodway.core.clock import ManualClock
from floodway.core.generation import GenerationEstimator
from floodway.modal.contract import CALL_HEADER, ITEM_ERROR
from floodway.modal.router.sequences import modal_book
from floodway.modal.router.streams import stream_pending

PROMPT = "x" * 400                     # 100 prompt tokens by the router's estimate


class FakeStream:
    """``method.remote_gen.aio(item)``: the call header after `queued_s` (Modal's queue),
    then `first_s` later the first chunk (one token), then a chunk of one token every
    `gap_s` (`tokens` in all), moving `clock` as it goes."""

    def __init__(self, clock: ManualClock, *, queued_s: float, first_s: float, gap_s: float,
                 tokens: int):
        self.clock, self.queued_s, self.first_s, self.gap_s = clock, queued_s, first_s, gap_s
        self.tokens = tokens
        self.remote_gen = SimpleNamespace(aio=self.gen)

    async def gen(self, item):
        self.clock.advance(self.queued_s)
        yield {CALL_HEADER: "fc-1"}
        self.clock.advance(self.first_s)
        yield {"text": "a", "tokens": 1}
        for _ in range(self.tokens - 1):
            self.clock.advance(self.gap_s)
            yield {"text": "b", "tokens": 1}


def _run(method, state, ep, inputs):
    async def go():
        pending = stream_pending("talk", method, inputs, clock=method.clock, timeout_s=60,
                                 max_stream_s=600, book=modal_book(ep, state))
        return await pending

    return asyncio.run(go())


def test_a_modal_stream_feeds_the_routers_generation_estimator():
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation(max_sequences=8, max_new_tokens=64))
    # 6 sequences in flight on 2 runners: a step is sampled with 3 active.
    state = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=6, runners=2)
    method = FakeStream(clock, queued_s=5.0, first_s=0.3, gap_s=0.04, tokens=11)
    out = _run(method, state, ep, [{"prompt": PROMPT, "max_new_tokens": 32}])
    assert out[0]["text"] == "a" + "b" * 10
    est = state.generation
    # Prefill: from the call header (not the 5 s in Modal's queue) to the first chunk, less
    # one step at the prior's step time with 3 active.
    [(tokens, prefill_s)] = list(est.prefills)
    step = GenerationEstimator().model.step_s(3)
    assert tokens == 100 and prefill_s == pytest.approx(0.3 - step)
    # Ten decode steps of 40 ms, each with 3 active; one finished sequence of 11 tokens.
    assert len(est.steps) == 10
    assert all(a == 3 and s == pytest.approx(0.04) for a, s in est.steps)
    assert list(est.requests) == [(100, 11)] and est.model.lengths == (11,)
    assert est.model.step_s(3) == pytest.approx(0.04)


def test_the_active_count_stays_within_one_and_the_slots():
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation(max_sequences=4))
    crowded = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=50, runners=2)
    _run(FakeStream(clock, queued_s=0, first_s=0.1, gap_s=0.02, tokens=3), crowded, ep, ["hi"])
    assert {a for a, _ in crowded.generation.steps} == {4}
    # No stats yet (runners None) and nothing else in flight: one.
    alone = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=0, runners=None)
    _run(FakeStream(clock, queued_s=0, first_s=0.1, gap_s=0.02, tokens=3), alone, ep, ["hi"])
    assert {a for a, _ in alone.generation.steps} == {1}


def test_a_failed_stream_is_no_finished_sequence():
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation())
    state = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=1, runners=1)

    class Failing(FakeStream):
        async def gen(self, item):
            yield {CALL_HEADER: "fc-2"}
            self.clock.advance(0.2)
            yield {"text": "a", "tokens": 1}
            yield {ITEM_ERROR: "RuntimeError: boom"}

    out = _run(Failing(clock, queued_s=0, first_s=0, gap_s=0, tokens=0), state, ep, ["hi"])
    assert "boom" in str(out[0])
    assert len(state.generation.prefills) == 1 and not state.generation.requests


# ------------------------------------------------------------ item errors


class Scripted:
    """``method.remote_gen.aio(item)`` for items ``{"say": [chunks...], "then": ...}``:
    the call header (``fc-<n>``, unless "then" is "queued": it never leaves Modal's queue),
    the chunks, then "end" (default), one ``{ITEM_ERROR: <"then">}`` or "hang" (until
    cancelled). `reached[i]` is set once call i yielded all it will before hanging."""

    def __init__(self):
        self.remote_gen = SimpleNamespace(aio=self.gen)
        self.reached: list[asyncio.Event] = []
        self.closed: list[int] = []

    async def gen(self, item):
        n = len(self.reached)
        reached = asyncio.Event()
        self.reached.append(reached)
        then = item.get("then", "end")
        try:
            if then != "queued":
                yield {CALL_HEADER: f"fc-{n}"}
                for chunk in item.get("say", []):
                    yield chunk
                if then not in ("hang", "end"):
                    yield {ITEM_ERROR: then}
            if then in ("hang", "queued"):
                reached.set()
                await asyncio.Event().wait()
        finally:
            self.closed.append(n)


def test_an_item_error_is_answered_as_the_local_router_answers_it():
    """Each input's "InputError: ..." becomes `item_failed`'s EndpointError: 422,
    "input_error", the field under that input's own index; any other error a 500."""
    from floodway.errors import EndpointError

    clock = ManualClock()
    inputs = [{"say": [{"text": "a", "tokens": 1}]},
              {"then": "InputError: prompt: 900 tokens is over the context of 512"},
              {"then": "InputError: max_new_tokens = 900 is not allowed"},
              {"then": "RuntimeError: boom"}]

    async def go():
        return await stream_pending("talk", Scripted(), inputs, clock=clock, timeout_s=60,
                                    max_stream_s=600)

    ok, prompt, cap, boom = asyncio.run(go())
    assert ok == {"text": "a", "tokens": 1}
    for err, field in ((prompt, "inputs[1].prompt"), (cap, "inputs[2].max_new_tokens")):
        assert isinstance(err, EndpointError)
        assert (err.status, err.kind, err.field) == (422, "input_error", field)
        assert "raised" not in str(err) and field.split(".")[0] in str(err)
    assert isinstance(boom, EndpointError) and boom.status == 500 and boom.kind is None
    assert "raised RuntimeError: boom" in str(boom)


# ------------------------------------------------------------ Generation.max_stream_s


def test_a_stream_is_stopped_and_its_call_cancelled_at_max_stream_s(monkeypatch):
    """From its first chunk a stream may run `max_stream_s` (here longer than the
    request's deadline, which bounds only the time to the first chunk); then the router
    stops reading, the input fails with TimeoutError, and its Modal call is cancelled by
    id."""
    import modal

    cancelled: list[str] = []

    async def cancel(call_id: str) -> None:
        cancelled.append(call_id)

    monkeypatch.setattr(modal.FunctionCall, "from_id", staticmethod(lambda call_id: (
        SimpleNamespace(cancel=SimpleNamespace(aio=lambda: cancel(call_id))))))
    clock, method = ManualClock(), Scripted()

    async def go():
        pending = stream_pending("talk", method, [{"say": [{"text": "a", "tokens": 1}],
                                                   "then": "hang"}],
                                 clock=clock, timeout_s=5, max_stream_s=30)
        first = await pending.next_event()
        await method.reached[0].wait()
        wakes = []
        for _ in range(50):                    # the watchdog's next wake: settled
            await asyncio.sleep(0)
            wakes.append(clock.next_wake_s())
        clock.advance(29)                      # past the deadline, within max_stream_s
        for _ in range(5):
            await asyncio.sleep(0)
        alive = not pending.futures[0].done()
        clock.advance(1.5)
        end = await pending.next_event()
        await asyncio.wait(pending.futures)
        return first, wakes[-1], alive, end

    first, wake, alive, end = asyncio.run(go())
    assert first.data == {"text": "a", "tokens": 1}
    assert wake == 30 and alive                # its first chunk came at 0
    assert isinstance(end.error, TimeoutError) and "max_stream_s (30 s)" in str(end.error)
    assert cancelled == ["fc-0"] and method.closed == [0]


def test_the_book_follows_each_sequence_from_modals_queue_to_its_end():
    """Through `stream_pending`: an input is in the book's queue from its enqueue until
    its call header, then running with its streamed tokens; every one leaves the book when
    it ends, also one cancelled before its task ever ran."""
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation(max_new_tokens=64))
    book = modal_book(ep, SimpleNamespace(generation=GenerationEstimator(), inflight_rows=3,
                                          runners=1))
    method = Scripted()
    two = [{"say": [{"text": "a", "tokens": 2}, {"text": "b", "tokens": 3}], "then": "hang"},
           {"prompt": "y" * 400, "then": "queued"}]

    async def go():
        pending = stream_pending("talk", method, two, clock=clock, timeout_s=60,
                                 max_stream_s=600, book=book, tenant="t")
        queued_at_once = book.queue().ahead(0)[0]
        while len(method.reached) < 2:          # both calls started
            await asyncio.sleep(0)
        await asyncio.gather(*(e.wait() for e in method.reached))
        [running] = book.running.values()
        mid = (running.tokens, running.chunks, book.queue().ahead(0)[:2],
               dict(book.queue().tenant_sequences))
        pending.cancel()
        await asyncio.wait(pending.futures)
        never = stream_pending("talk", method, two, clock=clock, timeout_s=60,
                               max_stream_s=600, book=book)
        never.cancel()                         # before its tasks took a step
        await asyncio.wait(never.futures)
        return queued_at_once, mid

    queued_at_once, (tokens, chunks, queued, tenants) = asyncio.run(go())
    assert queued_at_once == 2
    assert (tokens, chunks) == (5, 2) and queued == (1, 100) and tenants == {"t": 1}
    assert book.running == {} and book.queue().ahead(0) == (0, 0, 0)
    assert not book.queue().tenant_sequences


def test_the_backends_stream_snapshot_sees_its_requests_sequences():
    """`ModalBackend`: one book per endpoint for all its requests; `stream_snapshot`
    itemizes the running sequences (tokens streamed) and prices the router's own inputs in
    Modal's backlog by their prompts."""
    import floodway as fw
    from floodway.modal.kv import MemoryKV
    from floodway.modal.router.backend import ModalBackend

    app = fw.App("s")

    @app.endpoint(generation=fw.Generation(max_sequences=4, max_new_tokens=64),
                  warm=fw.WarmPool(min_containers=1, max_containers=2))
    async def talk(model, prompt: dict):
        yield {"text": "", "tokens": 0}

    method = Scripted()
    method.get_current_stats = SimpleNamespace(aio=_stats)
    backend = ModalBackend(app, {"talk": lambda: SimpleNamespace(stream=method)},
                           clock=ManualClock(), stats=MemoryKV())
    running = {"say": [{"text": "a", "tokens": 1}] * 60, "then": "hang", "max_new_tokens": 64}
    waiting = {"prompt": "y" * 400, "then": "queued"}

    async def go():
        await backend.refresh("talk")          # one runner, one input in Modal's backlog
        first = backend.enqueue("talk", [running], timeout_s=60, tenant="a")
        second = backend.enqueue("talk", [waiting], timeout_s=60, tenant="b")
        while len(method.reached) < 2:
            await asyncio.sleep(0)
        await asyncio.gather(*(e.wait() for e in method.reached))
        snap = backend.stream_snapshot("talk")
        first.cancel(), second.cancel()
        await asyncio.wait([*first.futures, *second.futures])
        return snap, backend._eps["talk"].sequences

    snap, book = asyncio.run(go())
    [c] = snap.containers
    step = snap.model.step_s(2)
    assert c.active == 2 and c.ends_in_s == pytest.approx((4 * step, 64 * step))
    assert snap.queue.ahead(0) == (1, 100, 64)
    assert book.running == {} and book.queue().ahead(0) == (0, 0, 0)


async def _stats():
    return SimpleNamespace(backlog=1, num_total_runners=1)
