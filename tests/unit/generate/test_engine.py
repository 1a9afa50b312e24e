"""The continuous-batching engine on the tiny GPT-2's ONNX build: greedy output equals
`transformers`' generate() token for token (alone and sharing decode steps), seeded
sampling repeats, stop strings and max_new_tokens end sequences, cancellation frees the
slot before the next step, admission respects the sequence and cache limits, and a
finishing sequence does not stall the others."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from floodway.errors import RequestError
from floodway.generate.factory import engine_for
from floodway.generate.sequence import Running

PROMPTS = ["Warm pools absorb a burst", "The key", "user: how do warm pools help?\nassistant:",
           "Quick brown foxes", "a"]
WAIT_S = 60     # an upper bound on waiting for an event, never a fixed sleep


@pytest.fixture
def tokens(monkeypatch):
    """Every finished sequence's (prompt ids, generated ids), by its prompt ids."""
    seen: dict[tuple[int, ...], list[int]] = {}
    accept = Running.accept

    def recording(self, scores):
        chunk = accept(self, scores)
        if self.finish is not None:
            seen[self.request.ids] = list(self.generated)
        return chunk

    monkeypatch.setattr(Running, "accept", recording)
    return seen


class Calls:
    """Wraps an engine's graph: logs (kind, rows) per call; with `gated`, each call waits
    for `step()` (the test moves the engine one graph call at a time)."""

    def __init__(self, engine, gated: bool = False):
        self.log: list[tuple[str, int]] = []
        self.gated = gated
        self.entered = threading.Semaphore(0)
        self.gate = threading.Semaphore(0)
        inner = engine.runner

        def run(feeds):
            kind = "prefill" if feeds["past_key_values.0.key"].shape[2] == 0 else "decode"
            self.log.append((kind, feeds["input_ids"].shape[0]))
            if self.gated:
                self.entered.release()
                assert self.gate.acquire(timeout=WAIT_S)
            return inner(feeds)

        engine.runner = run

    def next_call(self) -> None:
        """Let the call in progress finish; return once the next one has started."""
        self.gate.release()
        assert self.entered.acquire(timeout=WAIT_S)

    def open(self) -> None:
        self.gated = False
        self.gate.release(1000)


def collect(engine, prompt, log=None, name=None):
    """Submit `prompt`; -> (chunks list, event set on the last chunk, its id)."""
    chunks, done = [], threading.Event()

    def deliver(c):
        if isinstance(c, BaseException):    # the engine closed while it ran
            done.set()
            return True
        chunks.append(c)
        if log is not None and "finish_reason" in c:
            log.append(("finish", name))
        if "finish_reason" in c:
            done.set()
        return True

    sid = engine.submit(engine.request(prompt), deliver)
    return chunks, done, sid


async def _run(engine, prompt):
    return [c async for c in engine.stream(prompt)]


def _text(chunks):
    return "".join(c["text"] for c in chunks)


def hf_greedy(hf_model, ids, max_new):
    import torch

    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                dtype=torch.long), max_new_tokens=max_new, do_sample=False)
    return out[0, len(ids):].tolist()


def test_greedy_matches_transformers_alone_and_batched(loaded, hf_model, tokens):
    engine = engine_for(loaded, max_sequences=8, max_new_tokens=24)
    calls = Calls(engine)
    try:
        together = asyncio.run(_gather(engine, PROMPTS))
        batched = dict(tokens)
        tokens.clear()
        alone = [asyncio.run(_run(engine, p)) for p in PROMPTS]
    finally:
        engine.close()
    assert max(rows for kind, rows in calls.log if kind == "decode") > 1   # steps were shared
    st = engine.stats
    assert st.completion_tokens == 2 * sum(c[-1]["usage"]["completion_tokens"] for c in alone)
    assert st.finished_stop + st.finished_length == 2 * len(PROMPTS) and st.cancelled == 0
    assert st.decode_s > 0 and st.prefills >= 1 + len(PROMPTS)
    assert [_text(c) for c in together] == [_text(c) for c in alone]
    for p, chunks in zip(PROMPTS, together, strict=True):
        ids = engine.request(p).ids
        want = hf_greedy(hf_model, list(ids), 24)
        assert batched[ids] == want and tokens[ids] == want, p
        assert chunks[-1]["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(want)}
        assert sum(c["tokens"] for c in chunks) == len(want)
        eos = want[-1] == 0
        assert chunks[-1]["finish_reason"] == ("stop" if eos else "length")
        assert _text(chunks) == engine.tokenize.tokenizer.decode(want, skip_special_tokens=True)


async def _gather(engine, prompts):
    return await asyncio.gather(*(_run(engine, p) for p in prompts))


def test_same_seed_same_text_alone_or_batched_and_streamed_or_not(loaded):
    engine = engine_for(loaded, max_sequences=4, max_new_tokens=30)
    sampled = {"prompt": "Warm pools", "temperature": 0.9, "top_p": 0.9, "seed": 7}
    try:
        alone = asyncio.run(_run(engine, sampled))
        others = [{"prompt": "The key", "temperature": 1.0, "seed": 1}, "a", "Quick"]
        batched = asyncio.run(_gather(engine, [sampled, *others]))[0]
        other_seed = asyncio.run(_run(engine, {**sampled, "seed": 8}))
    finally:
        engine.close()
    assert _text(alone) == _text(batched) and len(alone) > 1
    assert alone[-1]["usage"] == batched[-1]["usage"]
    assert _text(other_seed) != _text(alone)


def test_stop_strings_cut_the_text_and_end_the_sequence(loaded):
    engine = engine_for(loaded, max_sequences=2, max_new_tokens=40)
    try:
        full = _text(asyncio.run(_run(engine, {"prompt": "Warm pools", "max_new_tokens": 40})))
        # a stop string from the middle of the greedy answer
        stop = next(full[i:i + 2] for i in range(5, len(full) - 2)
                    if full[i:i + 2].isprintable() and "\ufffd" not in full[i:i + 2])
        chunks = asyncio.run(_run(engine, {"prompt": "Warm pools", "stop": [stop, "\x00zz"]}))
    finally:
        engine.close()
    assert _text(chunks) == full[:full.index(stop)]
    assert chunks[-1]["finish_reason"] == "stop"
    assert all(stop not in c["text"] for c in chunks)
    assert chunks[-1]["usage"]["completion_tokens"] < 40


def test_max_new_tokens_caps_and_refuses_over_the_endpoint_cap(loaded):
    engine = engine_for(loaded, max_sequences=2, max_new_tokens=10)
    try:
        chunks = asyncio.run(_run(engine, {"prompt": "Quick brown", "max_new_tokens": 3}))
        with pytest.raises(RequestError, match="max_new_tokens = 11 is not allowed") as e:
            engine.request({"prompt": "x", "max_new_tokens": 11})
        with pytest.raises(RequestError, match="temperature") as t:
            engine.request({"prompt": "x", "temperature": 3})
    finally:
        engine.close()
    assert e.value.status == 422 and e.value.field == "max_new_tokens"
    assert t.value.field == "temperature"
    assert chunks[-1]["usage"]["completion_tokens"] <= 3
    assert sum(c["tokens"] for c in chunks) == chunks[-1]["usage"]["completion_tokens"]


def test_a_prompt_too_long_for_the_context_is_refused_and_max_new_is_cut_to_fit(loaded):
    engine = engine_for(loaded, max_sequences=2, kv_cache_tokens=20, max_new_tokens=50)
    try:
        with pytest.raises(RequestError, match="prompt: .* tokens is too long"):
            engine.request({"prompt": "Warm pools absorb a burst of traffic " * 3})
        req = engine.request({"prompt": "Warm pools"})
    finally:
        engine.close()
    assert req.reservation == 20 and req.max_new_tokens == 20 - len(req.ids)


def test_cancel_frees_the_slot_and_cache_before_the_next_step(loaded):
    engine = engine_for(loaded, max_sequences=2, max_new_tokens=100)
    calls = Calls(engine, gated=True)
    a, _, sid_a = collect(engine, {"prompt": "Warm pools", "max_new_tokens": 100})
    b, _, _ = collect(engine, {"prompt": "The key", "max_new_tokens": 100})
    b_reserved = engine.request({"prompt": "The key", "max_new_tokens": 100}).reservation
    try:
        assert calls.entered.acquire(timeout=WAIT_S)
        for _ in range(6):      # until both run and a decode step over both is in flight
            if calls.log[-1] == ("decode", 2):
                break
            calls.next_call()
        assert engine.load()[0] == 2 and calls.log[-1] == ("decode", 2)
        engine.cancel(sid_a)    # while that step is in flight
        calls.next_call()       # it ends; the next step starts without a
        assert calls.log[-1] == ("decode", 1)
        assert engine.load() == (1, b_reserved, 2 * 128)
        seen = len(a)
        for _ in range(3):
            calls.next_call()
        assert len(a) == seen and calls.log[-4:] == [("decode", 1)] * 4
        assert engine.stats.cancelled == 1
    finally:
        calls.open()
        engine.close()


def test_aclose_of_the_stream_cancels_its_sequence(loaded):
    engine = engine_for(loaded, max_sequences=2, max_new_tokens=100)
    freed = threading.Event()
    engine.on_load = lambda load: freed.set() if load[0] == 0 else None

    async def first_then_close():
        stream = engine.stream({"prompt": "Warm pools"})
        async for _ in stream:
            break
        await stream.aclose()
        return engine.steps

    try:
        at_close = asyncio.run(first_then_close())
        assert freed.wait(WAIT_S)
        assert engine.load()[:2] == (0, 0) and engine.steps <= at_close + 1
        assert engine.stats.cancelled == 1 and engine.stats.finished_length == 0
    finally:
        engine.close()


def test_admission_respects_max_sequences_and_a_finish_does_not_stall_others(loaded):
    engine = engine_for(loaded, max_sequences=2, max_new_tokens=30)
    calls = Calls(engine)
    log = calls.log
    try:
        short, d1, _ = collect(engine, {"prompt": "Warm", "max_new_tokens": 3, "stop": []},
                            log, "short")
        long_, d2, _ = collect(engine, {"prompt": "The", "max_new_tokens": 30}, log, "long")
        third, d3, _ = collect(engine, {"prompt": "Quick", "max_new_tokens": 5}, log, "third")
        assert d1.wait(WAIT_S) and d2.wait(WAIT_S) and d3.wait(WAIT_S)
    finally:
        engine.close()
    assert max(rows for kind, rows in (e for e in log if e[0] != "finish")) <= 2
    i_short, i_long = log.index(("finish", "short")), log.index(("finish", "long"))
    prefills = [i for i, e in enumerate(log) if e[0] == "prefill"]
    # the third waits for a slot: admitted (prefilled) only once the short one finished
    assert prefills[-1] > i_short
    # the long one keeps stepping right after the short one leaves, before it ends
    assert log[i_short + 1][0] in ("decode", "prefill") and i_long > i_short + 1
    assert short[-1]["usage"]["completion_tokens"] <= 3 and len(long_) >= 1 and third


def test_the_cache_budget_limits_admission(loaded):
    # each reserves 2-3 prompt tokens + 10: two do not fit in 20 tokens
    engine = engine_for(loaded, max_sequences=4, kv_cache_tokens=20, max_new_tokens=10)
    calls = Calls(engine)
    try:
        done = [collect(engine, {"prompt": p, "max_new_tokens": 10})[1]
                for p in ("Warm", "The", "Quick")]
        assert all(d.wait(WAIT_S) for d in done)
    finally:
        engine.close()
    assert {rows for _, rows in calls.log} == {1}
    assert engine.load() == (0, 0, 20)


def test_chat_messages_use_the_models_chat_template(loaded):
    engine = engine_for(loaded, max_sequences=2, max_new_tokens=8)
    msgs = [{"role": "user", "content": "how do warm pools help?"}]
    try:
        req = engine.request({"messages": msgs})
        chat = asyncio.run(_run(engine, {"messages": msgs}))
        plain = asyncio.run(_run(engine, "user: how do warm pools help?\nassistant:"))
    finally:
        engine.close()
    text = engine.tokenize.tokenizer.decode(list(req.ids))
    assert text == "user: how do warm pools help?\nassistant:"
    assert _text(chat) == _text(plain)


def test_loaded_generate_configures_once_and_reports_load(gen_build):
    from floodway.build.loader import load
    from floodway.errors import ArtifactError

    model = load(gen_build)
    assert model.generation_load() == (0, 0, 8 * 128)      # the defaults, before any use
    assert model.generation_stats() == {}
    loads, idle = [], threading.Event()

    def on_load(load):
        loads.append(load)
        if load[0] == 0:
            idle.set()

    model.configure_generation(max_sequences=3, kv_cache_tokens=300, max_new_tokens=4,
                               on_load=on_load)
    assert model.generation_load() == (0, 0, 300)

    async def go():
        return [c async for c in model.generate("Warm pools")]

    chunks = asyncio.run(go())
    try:
        with pytest.raises(RuntimeError, match="already running"):
            model.configure_generation(max_sequences=1)
        assert chunks[-1]["usage"]["completion_tokens"] <= 4
        assert model.generation_stats()["completion_tokens"] == \
            chunks[-1]["usage"]["completion_tokens"]
        assert model.generation_load() == (0, 0, 300)   # it left before its last chunk
        assert idle.wait(WAIT_S)
        assert loads[0][0] == 1 and loads[0][2] == 300 and loads[-1] == (0, 0, 300)
    finally:
        model.engine().close()
    other = load(gen_build)
    other.task = "feature-extraction"
    assert other.generation_load() == (0, 0, 0)
    with pytest.raises(ArtifactError, match="generate\\(\\) needs a text-generation build"):
        other.generate("x")


def test_scores_of_a_sequence_do_not_depend_on_its_batch(loaded):
    from floodway.generate import kv

    engine = engine_for(loaded)
    spec, run = engine.spec, loaded.runner
    ids = [[5, 6, 7, 8, 9], [10, 11]]
    both = kv.store_prefill(spec, run(kv.prefill_feeds(spec, ids)),
                            [kv.KVCache(spec, 8), kv.KVCache(spec, 8)], [5, 2])
    alone = kv.store_prefill(spec, run(kv.prefill_feeds(spec, ids[1:])),
                             [kv.KVCache(spec, 8)], [2])
    np.testing.assert_allclose(both[1], alone[0], atol=1e-4)
