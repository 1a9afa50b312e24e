"""A toy text-generation engine that batches internally, the way vLLM, SGLang or TGI do, for
`own_engine_app.py`. IT IS A STAND-IN: there is no model. A request's "tokens" are the words
of its prompt, and it generates those words in reverse order, over and over (greedy), or
drawn at random from them with its seed (temperature > 0), until ``max_tokens`` or a stop
string. What it does for real is the scheduling a serving engine does:

- iteration-level (continuous) batching: one step loop on the event loop; each step makes
  the next token of every running request at once and costs `step_s` whatever the batch
  size (``await asyncio.sleep``: the stand-in for one forward pass on a GPU, which leaves
  the loop free meanwhile);
- admission between steps: waiting requests join the running batch, first come first
  served, up to `max_num_seqs` and the KV-cache budget (each reserves its prompt plus its
  ``max_tokens``); a finished request leaves at once;
- abort: a request whose consumer goes away (its task cancelled, its generator closed)
  is aborted: it is not in the next step's batch and its cache is freed at once;
- `generation_load()` -> (running requests, KV tokens in use, KV capacity), which
  floodway's container reports (`/readyz` ``sequences``, ``floodway_kv_cache_*`` gauges).

Its API is vLLM's shape (`SamplingParams`, `RequestOutput` with a cumulative
``outputs[0].text``, ``generate(prompt, params, request_id)`` as an async generator), so
the endpoint in `own_engine_app.py` reads as it would over ``vllm.AsyncLLMEngine``. Only
`RequestOutput.first_step`, `last_step` and `peak_batch` are the toy's own: the engine
steps of the request's first and latest token and the largest batch it ran in, which show
that concurrent requests share steps.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """As ``vllm.SamplingParams``: `max_tokens` >= 1, `temperature` (0: greedy), `seed`
    (None: a fresh one), `stop` strings (the text ends before the first one). `top_p` is
    accepted and ignored: the toy has no distribution to cut."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompletionOutput:
    """As vLLM's: the text so far (cumulative), its token ids, and why it ended (None while
    it runs; "stop" or "length")."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None


@dataclass(frozen=True)
class RequestOutput:
    """As vLLM's, for one request after one step; plus the toy's step numbers."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    outputs: list[CompletionOutput]
    finished: bool
    first_step: int
    last_step: int
    peak_batch: int


@dataclass(eq=False)
class _Request:
    id: str
    words: list[str]
    params: SamplingParams
    rng: random.Random
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish: str | None = None
    first_step: int = 0
    peak_batch: int = 0

    @property
    def reserve(self) -> int:
        """KV tokens this request may hold: its prompt plus every token it may make."""
        return len(self.words) + self.params.max_tokens

    @property
    def kv_tokens(self) -> int:
        return len(self.words) + len(self.token_ids)

    def next_token(self) -> int:
        """Greedy: the prompt's words reversed, cycled; sampled: one of them at random."""
        n = len(self.words)
        if self.params.temperature > 0:
            return self.rng.randrange(n)
        return n - 1 - len(self.token_ids) % n

    def visible(self) -> str:
        """The text that may be shown now: while running, what a stop string could still
        claim (its length - 1 last characters) is held back, so a streamed prefix is never
        taken back."""
        if self.finish is not None or not self.params.stop:
            return self.text
        hold = max(len(s) for s in self.params.stop) - 1
        return self.text[:max(0, len(self.text) - hold)]


class ToyEngine:
    """The engine: `generate` per request, one step loop for all of them (started by the
    first request, on the running loop). `max_num_seqs` >= 1 requests run at once;
    `kv_capacity_tokens` bounds what they reserve; `step_s` > 0 is one step's cost."""

    def __init__(self, max_num_seqs: int = 8, kv_capacity_tokens: int = 4096,
                 step_s: float = 0.02) -> None:
        self.max_num_seqs, self.kv_capacity_tokens, self.step_s = (
            max_num_seqs, kv_capacity_tokens, step_s)
        self.steps = 0                          # steps run since the engine started
        self.waiting: deque[_Request] = deque()
        self.running: dict[str, _Request] = {}
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None

    # ------------------------------------------------------------------ the API
    async def generate(self, prompt: str, params: SamplingParams, request_id: str
                       ) -> AsyncIterator[RequestOutput]:
        """One request's outputs, one per step it ran in, the last with ``finished``.
        Closing the generator or cancelling its consumer aborts the request. Raises
        ValueError for a repeated `request_id`, ``max_tokens`` < 1, or a request whose
        prompt plus ``max_tokens`` is over the whole KV capacity."""
        if request_id in self.running or any(r.id == request_id for r in self.waiting):
            raise ValueError(f"request id {request_id!r} is already running")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {params.max_tokens}")
        req = _Request(request_id, prompt.split() or ["<empty>"], params,
                       random.Random(params.seed))
        if req.reserve > self.kv_capacity_tokens:
            raise ValueError(f"the prompt ({len(req.words)} tokens) plus max_tokens "
                             f"({params.max_tokens}) is over the KV capacity of "
                             f"{self.kv_capacity_tokens} tokens")
        self._start_loop()
        self.waiting.append(req)
        self._wake.set()
        try:
            while True:
                out = await req.queue.get()
                yield out
                if out.finished:
                    return
        finally:   # finished, or its consumer went away (CancelledError, GeneratorExit)
            if req.finish is None:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        """Stop a request: it leaves the waiting queue, or is not in the next step's batch
        and frees its cache now. An unknown or finished id is ignored (as vLLM's)."""
        self.running.pop(request_id, None)
        self.waiting = deque(r for r in self.waiting if r.id != request_id)

    def generation_load(self) -> tuple[int, int, int]:
        """(running requests, KV-cache tokens they hold, KV-cache capacity)."""
        return (len(self.running), sum(r.kv_tokens for r in self.running.values()),
                self.kv_capacity_tokens)

    # ------------------------------------------------------------------ the step loop
    def _start_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._wake = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _admit(self) -> None:
        """Waiting requests join, in order, while a slot and their reservation fit."""
        reserved = sum(r.reserve for r in self.running.values())
        while self.waiting and len(self.running) < self.max_num_seqs:
            if reserved + self.waiting[0].reserve > self.kv_capacity_tokens:
                break
            req = self.waiting.popleft()
            req.first_step = self.steps + 1
            reserved += req.reserve
            self.running[req.id] = req

    async def _run(self) -> None:
        while True:
            self._admit()
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                continue
            await asyncio.sleep(self.step_s)   # one forward pass for the whole batch
            self.steps += 1
            batch = list(self.running.values())   # aborted during the pass: not here
            for req in batch:
                req.peak_batch = max(req.peak_batch, len(batch))
                self._decode(req)

    def _decode(self, req: _Request) -> None:
        """`req`'s next token; its output to its consumer; it leaves when it finished."""
        tok = req.next_token()
        req.token_ids.append(tok)
        req.text += (" " if req.text else "") + req.words[tok]
        hits = [i for i in (req.text.find(s) for s in req.params.stop) if i >= 0]
        if hits:
            req.text, req.finish = req.text[:min(hits)], "stop"
        elif len(req.token_ids) >= req.params.max_tokens:
            req.finish = "length"
        if req.finish is not None:
            self.running.pop(req.id, None)
        req.queue.put_nowait(RequestOutput(
            req.id, tuple(range(len(req.words))),
            [CompletionOutput(req.visible(), tuple(req.token_ids), req.finish)],
            req.finish is not None, req.first_step, self.steps, req.peak_batch))


__all__ = ["CompletionOutput", "RequestOutput", "SamplingParams", "ToyEngine"]
