"""The containers of one simulated streaming endpoint (`GenPool`, the base of
`floodway.sim.generation`'s simulator): sequences, iterations of prefill + one decode step,
the router's FIFO queue of sequences, and the event heap.

Events are heap entries ``(time, kind, seq, obj)``: at equal times a container that becomes
ready or ends an iteration does so before a policy tick (`kind`), and events of one kind in
the order they were pushed (`seq`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from floodway.core.generation import GenerationModel
from floodway.core.reconcile import Box
from floodway.core.stream_snapshot import SequenceLoad
from floodway.sim.model import ColdStartModel

READY, STEP, TICK = 0, 1, 2


class Seq:
    """One sequence: request `idx`, its prompt tokens, the max_new_tokens it asked for, the
    tokens it really generates (`true_new`), its first-token deadline, tokens generated."""

    __slots__ = ("idx", "prompt", "max_new", "true_new", "deadline_s", "generated")

    def __init__(self, idx: int, prompt: int, max_new: int, true_new: int, deadline_s: float):
        self.idx, self.prompt, self.max_new = idx, prompt, max_new
        self.true_new, self.deadline_s, self.generated = true_new, deadline_s, 0

    @property
    def kv(self) -> int:
        """KV-cache tokens it reserves: prompt + max_new_tokens."""
        return self.prompt + self.max_new


class GenBox:
    """One simulated streaming container."""

    __slots__ = ("key", "warm", "stopped", "created_s", "ready_s", "stop_s", "running",
                 "joining", "in_step", "kv_used", "idle_since_s", "max_sequences",
                 "kv_capacity")

    def __init__(self, cid: int, created_s: float, ready_s: float, max_sequences: int,
                 kv_capacity: int | None) -> None:
        self.key = str(cid)
        self.warm = self.stopped = self.in_step = False
        self.created_s, self.ready_s, self.stop_s = created_s, ready_s, math.inf
        self.running: list[Seq] = []
        self.joining: list[Seq] = []
        self.kv_used = 0
        self.idle_since_s = ready_s
        self.max_sequences, self.kv_capacity = max_sequences, kv_capacity

    @property
    def active(self) -> int:
        return len(self.running) + len(self.joining)

    def fits(self, s: Seq) -> bool:
        """A free slot and KV room for `s` now."""
        return self.warm and self.active < self.max_sequences and (
            self.kv_capacity is None or self.kv_used + s.kv <= self.kv_capacity)

    def load(self, now: float) -> SequenceLoad:
        """This container as a runtime reports it (`build_stream_snapshot`'s input): the
        router knows what each sequence asked for and streamed, not its true length."""
        if not self.warm:
            return SequenceLoad(self.key, "starting", 0, self.max_sequences,
                                starting_for_s=now - self.created_s)
        seqs = self.running + self.joining
        return SequenceLoad(
            self.key, "busy" if seqs else "ready", len(seqs), self.max_sequences,
            tuple(s.max_new - s.generated for s in seqs), tuple(s.generated for s in seqs),
            self.kv_used, self.kv_capacity or 0, sum(s.prompt for s in seqs if s.generated == 0))

    def box(self) -> Box:
        """This container as `floodway.core.reconcile.reconcile` sees it."""
        busy = self.warm and self.active > 0
        return Box(self.key, "busy" if busy else "ready" if self.warm else "starting", busy,
                   self.idle_since_s)


class GenPool:
    """Containers, sequences and the queue of one run; a subclass reports first tokens,
    finished and expired sequences (`on_first_token`, `on_finished`, `on_expired`)."""

    def __init__(self, model: GenerationModel, max_sequences: int,
                 kv_cache_tokens: int | None, cold: ColdStartModel,
                 rng: np.random.Generator) -> None:
        self.model, self.max_sequences, self.kv_cache_tokens = model, max_sequences, \
            kv_cache_tokens
        self.cold, self.rng = cold, rng
        self.heap: list[tuple] = []
        self.seq = 0
        self.live: list[GenBox] = []
        self.boxes: list[GenBox] = []
        self.queue: deque[Seq] = deque()
        self.queued_prompt = 0
        self.started = 0
        self.tokens = 0

    def on_first_token(self, s: Seq, now: float) -> None: ...

    def on_finished(self, s: Seq, now: float) -> None: ...

    def on_expired(self, s: Seq) -> None: ...

    def push(self, t: float, kind: int, obj: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, obj))

    # ------------------------------------------------------------ containers
    def start_box(self, now: float, warm_now: bool = False) -> GenBox:
        cold = 0.0 if warm_now else self.cold.sample(self.rng)
        box = GenBox(len(self.boxes), now, now + cold, self.max_sequences, self.kv_cache_tokens)
        self.boxes.append(box)
        self.live.append(box)
        if warm_now:
            box.warm = True
        else:
            self.started += 1
            self.push(box.ready_s, READY, box)
        return box

    def stop_box(self, box: GenBox, now: float) -> None:
        box.stopped, box.stop_s = True, now
        self.live.remove(box)

    def on_ready(self, box: GenBox, now: float) -> None:
        box.warm = True
        box.idle_since_s = now
        self.drain(box, now)

    # ------------------------------------------------------------ sequences
    def join(self, box: GenBox, s: Seq, now: float) -> None:
        """`s` joins `box` between iterations (one starts now if it is idle)."""
        box.joining.append(s)
        box.kv_used += s.kv
        self.begin(box, now)

    def begin(self, box: GenBox, now: float) -> None:
        """Start an iteration: prefill the prompts that joined, then one decode step for
        every sequence (Orca's iteration-level scheduling)."""
        if box.in_step or not box.warm or not box.active:
            return
        m, joining = self.model, box.joining
        dur = m.prefill_s(sum(s.prompt for s in joining), len(joining)) + m.step_s(box.active)
        box.running.extend(joining)
        joining.clear()
        box.in_step = True
        self.push(now + dur, STEP, box)

    def on_step(self, box: GenBox, now: float) -> None:
        """An iteration ended: one token for every running sequence; finished ones leave,
        queued ones take their slots, and the next iteration starts."""
        box.in_step = False
        keep: list[Seq] = []
        for s in box.running:
            s.generated += 1
            self.tokens += 1
            if s.generated == 1:
                self.on_first_token(s, now)
            if s.generated >= s.true_new:
                box.kv_used -= s.kv
                self.on_finished(s, now)
            else:
                keep.append(s)
        box.running = keep
        self.drain(box, now)
        self.begin(box, now)
        if not box.active:
            box.idle_since_s = now

    def enqueue(self, s: Seq, now: float) -> None:
        self.queue.append(s)
        self.queued_prompt += s.prompt
        for box in self.live:
            if not self.queue:
                return
            self.drain(box, now)

    def drain(self, box: GenBox, now: float) -> None:
        """Queued sequences, in order, into `box` while it has room; those whose deadline
        passed are dropped (expired)."""
        q = self.queue
        while q and box.warm and not box.stopped:
            s = q[0]
            if s.deadline_s <= now:
                q.popleft()
                self.queued_prompt -= s.prompt
                self.on_expired(s)
                continue
            if not box.fits(s):
                return
            q.popleft()
            self.queued_prompt -= s.prompt
            self.join(box, s, now)


__all__ = ["READY", "STEP", "TICK", "GenBox", "GenPool", "Seq"]
