"""The continuous-batching engine: one step loop, on a thread of its own, over every running
sequence of a container.

Each iteration of the loop:

1. drops the sequences cancelled since the last one (their cache freed at once);
2. admits waiting sequences, first come first served, while they fit `Limits` (count and
   cache reservation; `floodway.generate.scheduler`);
3. prefills the newly admitted ones in one graph call (each yields its first token, sent
   at once: the time to first token does not wait for the others' step);
4. runs one decode step over every running sequence, their caches of different lengths
   packed into one padded batch (`floodway.generate.kv`);
5. sends each sequence's chunk; a finished one leaves the batch and frees its reservation
   there and then, so the others go on and a waiting one is admitted next iteration.

The graph calls release the GIL (ONNX Runtime), so the asyncio loop that consumes the
chunks keeps running. Chunks reach asyncio consumers through `call_soon_threadsafe`
(`stream`); a consumer that stops listening (`aclose()`, a cancelled task) cancels its
sequence, which leaves before the next step.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import numpy as np

from floodway.generate.kv import KVSpec, decode_feeds, prefill_feeds, store_decode, store_prefill
from floodway.generate.requests import RequestLimits, Tokenize, make_request
from floodway.generate.scheduler import Limits, admit
from floodway.generate.sequence import Deliver, Request, Running
from floodway.generate.stats import Stats

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
LoadListener = Callable[[tuple[int, int, int]], None]


class Engine:
    """Runs text-generation sequences with continuous batching (see the module doc).

    `runner`: the graph (`floodway.tasks.generation`'s inputs -> outputs by name);
    `spec`: its cache's shape; `tokenize`: prompt -> ids; `tokenizer`: for the text
    (`tokenizers.Tokenizer`); `eos`: end-of-sequence ids; `limits`: sequences and cache
    tokens at once; `requests`: max_new_tokens default/cap and the context length;
    `on_load`: called on the engine's thread with (active sequences, reserved cache tokens,
    capacity) after an iteration that changed them.
    """

    def __init__(self, runner: Runner, spec: KVSpec, *, tokenize: Tokenize, eos: Sequence[int],
                 limits: Limits, requests: RequestLimits, on_load: LoadListener | None = None):
        self.runner, self.spec, self.tokenize = runner, spec, tokenize
        self.eos, self.limits, self.requests, self.on_load = tuple(eos), limits, requests, on_load
        self._cond = threading.Condition()
        self._waiting: deque[Running] = deque()
        self._running: dict[int, Running] = {}
        self._cancels: set[int] = set()
        self._reserved = 0
        self._closed = False
        self._ids = itertools.count(1)
        self._reported: tuple[int, int, int] | None = None
        self.stats = Stats()            # written by the loop's thread only
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ public, any thread
    def request(self, prompt: Any) -> Request:
        """A prompt (fw.Prompt, dict, str) -> a Request. Raises RequestError (422)."""
        return make_request(prompt, self.tokenize, self.requests)

    def submit(self, request: Request, deliver: Deliver) -> int:
        """Queue `request`; `deliver` receives its chunks (then nothing more after the one
        with "finish_reason"), or an exception, on the engine's thread -> its id."""
        seq = Running(next(self._ids), request, deliver, self.tokenize.tokenizer, self.eos)
        with self._cond:
            if self._closed:
                raise RuntimeError("the engine is closed")
            self._waiting.append(seq)
            self._start()
            self._cond.notify()
        return seq.id

    def cancel(self, sid: int) -> None:
        """Stop sequence `sid` before the next step (unknown or finished ids: no-op)."""
        with self._cond:
            self._cancels.add(sid)
            self._cond.notify()

    def load(self) -> tuple[int, int, int]:
        """(running sequences, cache tokens they reserved, cache capacity in tokens)."""
        with self._cond:
            return len(self._running), self._reserved, self.limits.kv_capacity_tokens

    @property
    def steps(self) -> int:
        """Decode steps run so far."""
        return self.stats.steps

    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def close(self) -> None:
        """Stop the loop; sequences still waiting or running get RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    async def stream(self, prompt: Any) -> AsyncIterator[dict[str, Any]]:
        """The chunks of one sequence (`floodway.generate.sequence`), for asyncio. Leaving
        early (``aclose()``, cancellation) cancels the sequence. Raises RequestError (422)
        for a bad prompt, before anything is queued."""
        request = self.request(prompt)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def deliver(item: Any) -> bool:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
                return True
            except RuntimeError:     # the consumer's loop is closed
                return False

        sid = self.submit(request, deliver)
        ended = False
        try:
            while not ended:
                item = await queue.get()
                if isinstance(item, BaseException):
                    ended = True
                    raise item
                ended = "finish_reason" in item
                yield item
        finally:
            if not ended:
                self.cancel(sid)

    # ------------------------------------------------------------ the loop's thread
    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="floodway-generate",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._waiting or self._running or self._cancels):
                    self._cond.wait()
                if self._closed:
                    self._fail_all(RuntimeError("the engine was closed"))
                    return
                self._drop_cancelled()
                new = self._admit()
                running = list(self._running.values())
            if new:
                self._step(new, prefill=True)
            ready = [s for s in running if s.id in self._running]
            if ready:
                self._step(ready, prefill=False)
            self._report()

    def _drop_cancelled(self) -> None:
        """Under the lock: remove cancelled sequences from the queue and the batch."""
        if not self._cancels:
            return
        before = len(self._waiting)
        self._waiting = deque(s for s in self._waiting if s.id not in self._cancels)
        dropped = before - len(self._waiting)
        for sid in self._cancels & self._running.keys():
            self._remove(self._running[sid])
            dropped += 1
        self.stats.cancelled += dropped
        self._cancels.clear()

    def _admit(self) -> list[Running]:
        """Under the lock: move the waiting sequences that fit into the batch."""
        n = admit([s.request.reservation for s in self._waiting], len(self._running),
                  self._reserved, self.limits)
        new = [self._waiting.popleft() for _ in range(n)]
        for s in new:
            s.allocate(self.spec)
            self._running[s.id] = s
            self._reserved += s.request.reservation
        return new

    def _remove(self, seq: Running) -> None:
        """Under the lock: `seq` leaves the batch; its cache and reservation are freed."""
        if self._running.pop(seq.id, None) is not None:
            self._reserved -= seq.request.reservation
        seq.release()

    def _step(self, seqs: list[Running], *, prefill: bool) -> None:
        """One graph call over `seqs`, then each one's next token and chunk."""
        t0 = time.perf_counter()
        try:
            if prefill:
                prompts = [list(s.request.ids) for s in seqs]
                out = self.runner(prefill_feeds(self.spec, prompts))
                scores = store_prefill(self.spec, out, [s.cache for s in seqs],
                                       [len(p) for p in prompts])
            else:
                out = self.runner(decode_feeds(self.spec, [s.cache for s in seqs],
                                               [s.last for s in seqs]))
                scores = store_decode(self.spec, out, [s.cache for s in seqs])
        except Exception as e:  # noqa: BLE001 - the batch's sequences fail, the engine goes on
            self.stats.failed += len(seqs)
            with self._cond:
                for s in seqs:
                    self._remove(s)
            for s in seqs:
                try:
                    s.deliver(e)
                except Exception:  # noqa: BLE001, S110 - the others still hear of it
                    pass
            return
        self._count(seqs, prefill, time.perf_counter() - t0)
        for s, row in zip(seqs, scores, strict=True):
            self._advance(s, row)

    def _count(self, seqs: list[Running], prefill: bool, seconds: float) -> None:
        st = self.stats
        st.completion_tokens += len(seqs)
        if prefill:
            st.prefills += 1
            st.prompt_tokens += sum(len(s.request.ids) for s in seqs)
            st.prefill_s += seconds
        else:
            st.steps += 1
            st.decode_s += seconds

    def _advance(self, seq: Running, scores: np.ndarray) -> None:
        try:
            chunk = seq.accept(scores)
        except Exception as e:  # noqa: BLE001 - e.g. a tokenizer failure: this one fails
            seq.finish = "error"
            chunk = e
        if seq.finish is not None:      # it leaves before its last chunk is seen
            with self._cond:
                self._remove(seq)
            self.stats.finished_stop += seq.finish == "stop"
            self.stats.finished_length += seq.finish == "length"
            self.stats.failed += seq.finish == "error"
        if chunk is not None and not seq.deliver(chunk) and seq.finish is None:
            self.stats.cancelled += 1
            with self._cond:            # nobody listens any more
                self._remove(seq)

    def _fail_all(self, error: BaseException) -> None:
        """Under the lock: end every waiting and running sequence with `error`."""
        for s in [*self._waiting, *self._running.values()]:
            s.release()
            try:
                s.deliver(error)
            except Exception:  # noqa: BLE001, S110 - closing goes on for the others
                pass
        self._waiting.clear()
        self._running.clear()
        self._reserved = 0

    def _report(self) -> None:
        now = self.load()
        if self.on_load is not None and now != self._reported:
            self._reported = now
            try:
                self.on_load(now)
            except Exception:  # noqa: BLE001, S110 - a listener's failure must not stop the loop
                pass


__all__ = ["Engine", "LoadListener", "Runner"]
