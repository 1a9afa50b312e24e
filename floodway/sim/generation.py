"""A discrete-event simulator of one streaming (generative) endpoint, driven by the real
`floodway.routers.decide_stream.decide_stream` for every arrival and the real warm-pool
policy (`floodway.warmers.desired`) every minute, on the same service model
(`floodway.core.generation`); `floodway.sim.gen_pool` holds the containers.

    simulate_generation(trace, GenSimConfig(...)) -> GenSimResult
    scale_trace(trace, time_scale=, token_scale=) -> Trace

The model (iteration-level containers after Orca): docs/design/simulator.md
("Streaming endpoints").
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

import numpy as np

from floodway.config import Route, WarmPool
from floodway.core.generation import REQUEST_SAMPLES, GenerationModel
from floodway.core.priors import GENERATED_TOKENS_PRIOR, PROMPT_TOKENS_PRIOR
from floodway.core.reconcile import Do, reconcile
from floodway.core.stream_snapshot import build_stream_snapshot
from floodway.routers.decide import Action, Decision
from floodway.routers.decide_stream import SequenceQueue, StreamRequest, decide_stream, place
from floodway.sim.gen_pool import READY, STEP, TICK, GenPool, Seq
from floodway.sim.model import ColdStartModel
from floodway.sim.trace import MINUTE_S, Trace
from floodway.warmers.target import History, Measured, PolicyState, WarmTarget, desired


@dataclass(frozen=True)
class GenSimConfig:
    """A streaming endpoint as the simulator sees it: its `Route` and `WarmPool`, the
    `Generation` numbers (`max_sequences`, `kv_cache_tokens` (None: no KV budget),
    `max_new_tokens`), the containers' speed (`model`, also what `decide_stream` is told:
    a perfectly measured fit), cold starts, the tokens of a request when the trace has none,
    and the seed of the run's Generator."""

    route: Route = Route()
    warm: WarmPool = WarmPool()
    max_sequences: int = 8
    kv_cache_tokens: int | None = None
    max_new_tokens: int = 256
    model: GenerationModel = GenerationModel()
    cold: ColdStartModel = ColdStartModel()
    prompt_tokens: int = PROMPT_TOKENS_PRIOR
    generated_tokens: int = GENERATED_TOKENS_PRIOR
    seed: int = 0


@dataclass(frozen=True, eq=False)
class GenSimResult:
    """What one run measured. Counts per decision (`dispatched`, `queued`, `spill_cold`,
    `spill_async`, `shed` (503), `rejected` (413: longer than the KV budget)), `expired`
    (dropped from the queue at their deadline), `served` (got a first token), `finished`,
    `within_deadline` (first token by the deadline), `containers_started`. Per request
    (shape (n,), nan where not served): `ttft_s` (arrival to first token), `done_s` (arrival
    to last token). `tokens`: tokens generated; `span_s`: first arrival to last token;
    `container_s`: seconds containers were live (starting or warm)."""

    requests: int
    dispatched: int
    queued: int
    spill_cold: int
    spill_async: int
    shed: int
    rejected: int
    expired: int
    finished: int
    within_deadline: int
    containers_started: int
    tokens: int
    span_s: float
    container_s: float
    ttft_s: np.ndarray
    done_s: np.ndarray

    @property
    def served(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.ttft_s)))

    def ttft_quantile_s(self, q: float) -> float:
        """The q-quantile (0..1) of served requests' TTFT; nan without any."""
        t = self.ttft_s[~np.isnan(self.ttft_s)]
        return float(np.quantile(t, q)) if t.size else math.nan

    @property
    def ttft_p50_s(self) -> float:
        return self.ttft_quantile_s(0.5)

    @property
    def ttft_p99_s(self) -> float:
        return self.ttft_quantile_s(0.99)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.span_s if self.span_s > 0 else 0.0

    def rows(self) -> list[tuple[str, str]]:
        """(name, formatted value) pairs for a printed table (as `SimResult.rows`)."""
        def ms(x: float) -> str:
            return "-" if math.isnan(x) else f"{x * 1e3:,.1f} ms"
        return [
            ("requests", f"{self.requests:,}"),
            ("dispatched / queued / spill cold", f"{self.dispatched:,} / {self.queued:,} / "
                                                 f"{self.spill_cold:,}"),
            ("spill async / shed / expired", f"{self.spill_async:,} / {self.shed:,} / "
                                             f"{self.expired:,}"),
            ("refused (over the KV budget, 413)", f"{self.rejected:,}"),
            ("finished / first token within deadline", f"{self.finished:,} / "
                                                       f"{self.within_deadline:,}"),
            ("TTFT p50 / p99", f"{ms(self.ttft_p50_s)} / {ms(self.ttft_p99_s)}"),
            ("tokens generated", f"{self.tokens:,} ({self.tokens_per_s:,.1f} tokens/s)"),
            ("containers started", f"{self.containers_started:,}"),
            ("container-minutes", f"{self.container_s / 60:,.1f}"),
        ]


def scale_trace(trace: Trace, time_scale: float = 1.0, token_scale: float = 1.0) -> Trace:
    """`trace` with its gaps between arrivals multiplied by `time_scale` (from its first
    arrival) and its token counts by `token_scale` (rounded, at least 1): a production
    trace replayed at what a smaller machine can serve."""
    t = trace.times_s
    times = t[0] + (t - t[0]) * float(time_scale) if t.size else t

    def tok(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else np.maximum(1, np.rint(x * float(token_scale))).astype(
            np.int64)

    return Trace.from_times(times, trace.rows, trace.name, prompt_tokens=tok(trace.prompt_tokens),
                            generated_tokens=tok(trace.generated_tokens))


def simulate_generation(trace: Trace, config: GenSimConfig | None = None, **kw
                        ) -> GenSimResult:
    """Simulate `trace` against one streaming endpoint (`config`, or `GenSimConfig(**kw)`);
    see the module docstring for the model."""
    return _GenSim(trace, config or GenSimConfig(**kw)).run()


class _GenSim(GenPool):
    def __init__(self, trace: Trace, cfg: GenSimConfig) -> None:
        n = trace.requests
        cap = cfg.max_new_tokens
        prompts = trace.prompt_tokens if trace.prompt_tokens is not None \
            else np.full(n, cfg.prompt_tokens)
        gens = trace.generated_tokens if trace.generated_tokens is not None \
            else np.full(n, cfg.generated_tokens)
        super().__init__(cfg.model, cfg.max_sequences, cfg.kv_cache_tokens, cfg.cold,
                         np.random.default_rng(cfg.seed))
        self.trace, self.cfg = trace, cfg
        self.prompts = np.maximum(prompts.astype(np.int64), 1)
        self.gens = np.clip(gens.astype(np.int64), 1, cap)
        self.deadline = trace.times_s + cfg.route.timeout_s
        self.ttft = np.full(n, math.nan)
        self.done = np.full(n, math.nan)
        self.counts = dict.fromkeys(Action, 0)
        self.rejected = self.expired = 0
        self.history = History.from_counts(trace.counts, trace.start_minute)
        self.cap = cfg.warm.container_cap
        self.pstate: PolicyState | None = None
        self.target = WarmTarget(min(cfg.warm.min_containers, self.cap), 0,
                                 float(cfg.warm.scaledown_window_s), "the configured floor")
        self.finished_tokens: list[int] = []
        # What decide_stream is told: the configured speed, and (unless the config gives
        # them) the lengths of the last finished sequences, as a runtime's estimator keeps.
        self.told = cfg.model

    # ------------------------------------------------------------ what GenPool reports
    def on_first_token(self, s: Seq, now: float) -> None:
        self.ttft[s.idx] = now - self.trace.times_s[s.idx]

    def on_finished(self, s: Seq, now: float) -> None:
        self.done[s.idx] = now - self.trace.times_s[s.idx]
        self.finished_tokens.append(s.true_new)

    def on_expired(self, s: Seq) -> None:
        self.expired += 1

    # ------------------------------------------------------------ decisions
    def decision(self, i: int, now: float) -> tuple[Decision, StreamRequest, str | None]:
        """`decide_stream`'s answer for arrival `i` at `now`, its request, and the container
        a dispatch goes to (`place`, as the runtimes send it)."""
        cfg = self.cfg
        q = self.queue
        queue = SequenceQueue.fifo(len(q), self.queued_prompt, len(q) * cfg.max_new_tokens)
        snap = build_stream_snapshot(now, cfg, [b.load(now) for b in self.live], queue,
                                     model=self.told, cold_start_s=cfg.cold.estimate_s,
                                     max_sequences=cfg.max_sequences,
                                     kv_cache_tokens=cfg.kv_cache_tokens,
                                     max_new_tokens=cfg.max_new_tokens)
        req = StreamRequest(int(self.prompts[i]), cfg.max_new_tokens, float(self.deadline[i]))
        d = decide_stream(snap, req)
        where = place(snap, req) if d.action == Action.DISPATCH else None
        return d, req, None if where is None else where.containers[0]

    def arrive(self, i: int, now: float) -> None:
        d, req, target = self.decision(i, now)
        if d.action == Action.SHED and d.status == 413:
            self.rejected += 1
            return
        self.counts[d.action] += 1
        seq = Seq(i, req.prompt_tokens, req.max_new_tokens, int(self.gens[i]),
                  float(self.deadline[i]))
        if d.action == Action.DISPATCH:
            self.join(next(b for b in self.live if b.key == target), seq, now)
        elif d.action in (Action.QUEUE, Action.SPILL_COLD):
            if d.action == Action.SPILL_COLD:
                self.start_box(now)
            self.enqueue(seq, now)
        elif d.start_cold:
            self.start_box(now)

    # ------------------------------------------------------------ the warm pool
    def measured(self) -> Measured:
        cfg, done = self.cfg, self.finished_tokens
        per_request = sum(done) / len(done) if done else float(cfg.generated_tokens)
        return Measured.from_tokens(cfg.cold.estimate_s, cfg.model.tokens_per_s(
            cfg.max_sequences), cfg.max_sequences, per_request,
            cfg.model.prefill_s(float(np.mean(self.prompts)) if self.prompts.size else 0.0))

    def tick(self, now: float) -> None:
        if not self.cfg.model.lengths and self.finished_tokens:
            self.told = replace(self.cfg.model, lengths=tuple(sorted(
                self.finished_tokens[-REQUEST_SAMPLES:])))
        k = int(round(now / MINUTE_S)) - self.trace.start_minute
        hist = History.view_of(self.history, min(max(k, 0), len(self.trace.counts)))
        self.target, self.pstate = desired(now, hist, self.cfg.warm, self.measured(),
                                           self.pstate)
        busy = sum(1 for b in self.live if b.warm and b.active)
        plan = reconcile(self.target.keep(busy, self.cap), [b.box() for b in self.live], now,
                         self.target.scaledown_window_s)
        by_id = {b.key: b for b in self.live}
        for a in plan.actions:
            if a.do == Do.START:
                self.start_box(now)
            else:
                self.stop_box(by_id[a.container], now)

    # ------------------------------------------------------------ the run
    def run(self) -> GenSimResult:
        trace = self.trace
        times = trace.times_s
        for _ in range(self.target.min_containers):
            self.start_box(trace.start_s, warm_now=True)
        self.push(trace.start_s + MINUTE_S, TICK, None)
        for i in range(trace.requests):
            self.advance(float(times[i]))
            self.arrive(i, float(times[i]))
        self.advance(math.inf)
        return self.result()

    def advance(self, until: float) -> None:
        """Handle every event up to `until` (ticks only within the trace's span)."""
        heap, end = self.heap, self.trace.end_s
        while heap and heap[0][0] <= until:
            t, kind, _, obj = heapq.heappop(heap)
            if kind == READY:
                self.on_ready(obj, t)
            elif kind == STEP:
                self.on_step(obj, t)
            elif t < end:
                self.tick(t)
                self.push(t + MINUTE_S, TICK, None)

    def result(self) -> GenSimResult:
        c, times = self.counts, self.trace.times_s
        last = float(np.nanmax(self.done + times)) if np.any(~np.isnan(self.done)) \
            else float(times[-1])
        ends = [b.stop_s if b.stopped else last for b in self.boxes]
        within = int(np.count_nonzero(self.ttft + times <= self.deadline))
        return GenSimResult(
            requests=self.trace.requests, dispatched=c[Action.DISPATCH], queued=c[Action.QUEUE],
            spill_cold=c[Action.SPILL_COLD], spill_async=c[Action.SPILL_ASYNC],
            shed=c[Action.SHED], rejected=self.rejected, expired=self.expired,
            finished=int(np.count_nonzero(~np.isnan(self.done))), within_deadline=within,
            containers_started=self.started, tokens=self.tokens,
            span_s=max(0.0, last - float(times[0])),
            container_s=sum(max(0.0, e - b.created_s) for b, e in zip(self.boxes, ends,
                                                                       strict=True)),
            ttft_s=self.ttft, done_s=self.done)


__all__ = ["GenSimConfig", "GenSimResult", "scale_trace", "simulate_generation"]
