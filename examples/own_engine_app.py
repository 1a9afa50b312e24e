"""Bring your own engine: a streaming endpoint over an engine that batches internally (the
shape of vLLM, SGLang or TGI), plugged in with a `load=` hook.

    floodway build examples/own_engine_app.py
    floodway serve examples/own_engine_app.py
    curl -sN -X POST http://127.0.0.1:8000/v1/own_engine -H 'Content-Type: application/json' \
         -H 'Accept: text/event-stream' \
         -d '{"inputs": [{"prompt": "warm pools absorb bursts", "max_new_tokens": 6}]}'
    # data: {"index":0,"chunk":{"text":"bursts","tokens":1}}
    # data: {"index":0,"chunk":{"text":" absorb","tokens":1}}  ... then the whole output

THE ENGINE IS A TOY STAND-IN (`examples/toy_engine.py`): there is no model. It generates the
prompt's words in reverse order, over and over ("bursts absorb pools warm bursts absorb"),
or, with ``temperature`` > 0, words of the prompt drawn at random from ``seed``. What is real
is how it runs, as a serving engine does: one step loop on the container's event loop makes
the next token of every running request at once, each step costing the same time whatever
the batch (a stand-in for one forward pass on a GPU); new requests join between steps, up to
``max_num_seqs`` and its KV-cache budget; a request whose client went away is aborted and
is not in the next step; ``generation_load()`` reports (running, KV tokens, KV capacity).

floodway around it: the function is an async generator (a streaming endpoint), called once
per input with one `fw.Prompt`; it yields ``{"text", "tokens"}`` chunks, the last one with
``finish_reason`` and ``usage`` (and the toy's ``engine`` step numbers), so SSE and NDJSON
streaming, the buffered answer, ``/v1/chat/completions`` and ``/v1/completions``, the
metrics (time to first chunk, generated tokens) and cancellation work as on the built-in
engine. A client that disconnects makes the router send Cancel; the container cancels the
sequence's task, which closes this generator, which closes the engine's ``generate()``
generator, which aborts the request. `fw.Generation(max_sequences=...)` is the number of
sequences the router sends one container at once: the engine's ``max_num_seqs``.

The same endpoint over vLLM (not run in CI; vLLM's engine API, `AsyncLLMEngine` being
`vllm.v1.engine.async_llm.AsyncLLM` in vLLM's V1 engine):

    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.engine.async_llm_engine import AsyncLLMEngine

    def load(artifacts: fw.Artifacts):
        return AsyncLLMEngine.from_engine_args(AsyncEngineArgs(
            model=str(artifacts.source_dir), max_num_seqs=MAX_SEQUENCES))

    @endpoints.endpoint(model=fw.HFModel(REPO, revision=SHA), load=load, gpu="L4",
                        generation=fw.Generation(max_sequences=MAX_SEQUENCES))
    async def generate(engine, prompt: fw.Prompt):
        params = SamplingParams(max_tokens=prompt.max_new_tokens or MAX_NEW_TOKENS,
                                temperature=prompt.temperature, top_p=prompt.top_p,
                                seed=prompt.seed, stop=prompt.stop)
        text, n = "", 0
        # outputs[0].text is cumulative: yield its deltas. Closing this generator (the
        # client left) closes engine.generate(), which aborts the request in vLLM.
        async for out in engine.generate(prompt.prompt, params, uuid.uuid4().hex):
            c = out.outputs[0]
            chunk = {"text": c.text[len(text):], "tokens": len(c.token_ids) - n}
            text, n = c.text, len(c.token_ids)
            if out.finished:
                chunk |= {"finish_reason": c.finish_reason,
                          "usage": {"prompt_tokens": len(out.prompt_token_ids),
                                    "completion_tokens": n}}
            yield chunk

(chat ``messages`` through the model's chat template: ``tokenizer.apply_chat_template(
messages, tokenize=False, add_generation_prompt=True)`` with ``await
engine.get_tokenizer()``.) vLLM has no ``generation_load()``: floodway then reports the
running generators as the container's sequences and no KV figures.
"""

import uuid

import floodway as fw
from examples.toy_engine import SamplingParams, ToyEngine
from floodway.deploy import to_modal

MAX_SEQUENCES = 8          # sequences per container: the router's slots, the engine's batch
MAX_NEW_TOKENS = 256       # the default and the cap of a request's max_new_tokens
KV_CAPACITY_TOKENS = MAX_SEQUENCES * 4096
STEP_S = 0.02              # the toy's cost of one step (one "forward pass"), any batch size

endpoints = fw.App("floodway-own-engine")


def load(artifacts: fw.Artifacts) -> ToyEngine:
    """Once per container: the engine (its step loop starts with the first request, on
    the loop that serves). No model files: the endpoint has no source."""
    return ToyEngine(max_num_seqs=MAX_SEQUENCES, kv_capacity_tokens=KV_CAPACITY_TOKENS,
                     step_s=STEP_S)


def render(prompt: fw.Prompt) -> str:
    """The text the engine continues: the prompt, or the chat as ``role: content`` lines
    and ``assistant:`` (a real engine applies the model's chat template)."""
    if prompt.prompt is not None:
        return prompt.prompt
    return "\n".join([*(f"{m.role}: {m.content}" for m in prompt.messages), "assistant:"])


@endpoints.endpoint(
    load=load,
    warm=fw.WarmPool(min_containers=1, scaledown_window_s=120, max_containers=4),
    route=fw.Route(max_queue=64, timeout_s=10.0),
    generation=fw.Generation(max_sequences=MAX_SEQUENCES, max_new_tokens=MAX_NEW_TOKENS),
)
async def own_engine(engine: ToyEngine, prompt: fw.Prompt):
    """One prompt -> one chunk per engine step: ``{"text": <delta>, "tokens": 1}``; the last
    adds ``finish_reason`` ("stop" or "length"), ``usage`` and ``engine`` (the steps of the
    first and last token, the largest batch this request ran in)."""
    params = SamplingParams(max_tokens=prompt.max_new_tokens or MAX_NEW_TOKENS,
                            temperature=prompt.temperature, top_p=prompt.top_p,
                            seed=prompt.seed, stop=tuple(prompt.stop))
    text, n = "", 0
    async for out in engine.generate(render(prompt), params, uuid.uuid4().hex):
        c = out.outputs[0]
        chunk = {"text": c.text[len(text):], "tokens": len(c.token_ids) - n}
        text, n = c.text, len(c.token_ids)
        if out.finished:
            chunk |= {"finish_reason": c.finish_reason,
                      "usage": {"prompt_tokens": len(out.prompt_token_ids),
                                "completion_tokens": n},
                      "engine": {"first_step": out.first_step, "last_step": out.last_step,
                                 "peak_batch": out.peak_batch}}
        yield chunk


app = to_modal(endpoints)
