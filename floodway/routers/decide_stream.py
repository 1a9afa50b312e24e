"""The admission decision for streaming (generative) endpoints: a pure function of a snapshot
of sequence slots and one request.

    decide_stream(snapshot, request) -> Decision     (decide.py's Action and Decision)

The deadline bounds the time to the first token; `Decision.est_wait_s` is its estimate. The
snapshot comes from `floodway.core.stream_snapshot.build_stream_snapshot` and the service
model from `floodway.core.generation` (iteration-level scheduling after Orca, Yu et al.,
OSDI 2022; a KV-cache budget per container after vLLM, Kwon et al., SOSP 2023). The
algorithm, step by step (the steps the code's comments name), and why each part is
counted as it is (measured with benchmarks/generate.py): docs/design/decision.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import ClassVar, NamedTuple

from floodway.core.generation import GenerationModel, nth_slot_s
from floodway.routers.decide import (
    HEADROOM,
    LIVE,
    QUEUE_SHARE,
    TENANT_SHARE,
    WARM,
    Action,
    AsyncSpill,
    Decision,
    SpillContext,
    SpillTarget,
    late_shed,
    spill_or_shed,
    time_left_s,
)


def _prio(p: int) -> int:
    return max(0, min(2, int(p)))


@dataclass(frozen=True)
class SequenceQueue:
    """The router's queue of sequences for one endpoint, by priority (0 low, 1 normal, 2
    high): how many, their prompt tokens and their max_new_tokens (sums), and sequences per
    tenant. A queue served in arrival order whatever the priority (Modal's input queue) puts
    everything under high (`fifo`)."""

    sequences_by_priority: tuple[int, int, int] = (0, 0, 0)
    prompt_tokens_by_priority: tuple[int, int, int] = (0, 0, 0)
    new_tokens_by_priority: tuple[int, int, int] = (0, 0, 0)
    tenant_sequences: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def fifo(cls, sequences: int, prompt_tokens: int, new_tokens: int,
             tenant_sequences: Mapping[str, int] | None = None) -> SequenceQueue:
        return cls((0, 0, sequences), (0, 0, prompt_tokens), (0, 0, new_tokens),
                   dict(tenant_sequences or {}))

    @property
    def sequences(self) -> int:
        return sum(self.sequences_by_priority)

    def ahead(self, priority: int) -> tuple[int, int, int]:
        """(sequences, prompt tokens, new tokens) queued at `priority` or above: served
        before a request of that priority."""
        p = _prio(priority)
        return (sum(self.sequences_by_priority[p:]), sum(self.prompt_tokens_by_priority[p:]),
                sum(self.new_tokens_by_priority[p:]))


@dataclass(frozen=True)
class StreamContainer:
    """One container as `decide_stream` sees it (built by `build_stream_snapshot`).

    `state`: starting | warming | ready | busy | draining | stopped | failed. `active`:
    sequences on it (sent, not ended); `ends_in_s`: seconds until each running sequence
    ends (ascending); `kv_free_tokens`: KV-cache tokens not reserved, `kv_per_sequence`: what
    one ending sequence frees (the mean reservation), `kv_capacity`: its budget (inf: none);
    `pending_prompt_tokens`: prompt tokens sent and not yet prefilled; `ready_in_s`: seconds
    until a starting container is ready."""

    id: str
    state: str
    active: int = 0
    max_sequences: int = 1
    ends_in_s: tuple[float, ...] = ()
    kv_free_tokens: float = math.inf
    kv_per_sequence: float = 0.0
    kv_capacity: float = math.inf
    pending_prompt_tokens: int = 0
    ready_in_s: float = 0.0

    def free_now(self, need: int) -> int:
        """Sequences reserving `need` KV tokens each that it can take now (warm only)."""
        if self.state not in WARM:
            return 0
        return max(0, min(self.max_sequences - self.active, _fits(self.kv_free_tokens, need)))

    def slot_instants(self, need: int) -> list[float]:
        """Seconds from now at which it has a slot (and KV room) for a sequence of `need`
        KV tokens, one entry per slot, ascending: free now, then as running sequences end
        (each frees a slot and `kv_per_sequence`); a starting one's slots when it is ready."""
        if self.state not in LIVE:
            return []
        if self.state not in WARM:
            return [self.ready_in_s] * min(self.max_sequences, _fits(self.kv_capacity, need))
        out = [0.0] * self.free_now(need)
        usable = len(out)
        for k, t in enumerate(self.ends_in_s, 1):
            u = max(0, min(self.max_sequences - self.active + k,
                           _fits(self.kv_free_tokens + k * self.kv_per_sequence, need)))
            out.extend([t] * (u - usable))
            usable = max(usable, u)
        return out


def _fits(tokens: float, need: int) -> int:
    """How many reservations of `need` tokens fit in `tokens` (a large number for inf)."""
    if not math.isfinite(tokens):
        return 1 << 30
    return max(0, math.floor(tokens / max(need, 1)))


@dataclass(frozen=True)
class StreamSnapshot:
    """A streaming endpoint at `now_s`: its containers, the fitted `model`, the measured
    `cold_start_s`, the slots (`max_sequences`) and KV budget (`kv_cache_tokens`, inf: none)
    of a new container, the route's `max_queue` (sequences) and `spill`, the containers that
    may be live, the queue, and whether the job store takes async spills."""

    now_s: float
    containers: tuple[StreamContainer, ...]
    model: GenerationModel
    cold_start_s: float
    max_sequences: int
    max_queue: int
    max_containers: int
    kv_cache_tokens: float = math.inf
    spill: tuple[str, ...] = ("cold", "async")
    queue: SequenceQueue = SequenceQueue()
    async_accepting: bool = True
    loop_lag_s: float = 0.0   # the router's recent event-loop lag (`decide.time_left_s`)
    # The most containers the endpoint may ever run (0: `max_containers`), where that is
    # more than may be live now (fewer while starts are failing).
    container_cap: int = 0


@dataclass(frozen=True)
class StreamRequest:
    """One request of `sequences` sequences (one per input; usually 1): `prompt_tokens` in
    all (estimated: `floodway.core.generation.estimate_prompt_tokens`), `max_new_tokens`
    per sequence, the absolute `deadline_s` of its first token (snapshot clock), priority
    (0 low, 1 normal, 2 high), tenant, and whether it may become an async job."""

    prompt_tokens: int
    max_new_tokens: int
    deadline_s: float
    priority: int = 1
    tenant: str = "anonymous"
    allow_async: bool = True
    sequences: int = 1

    @property
    def prompt_per_sequence(self) -> int:
        return math.ceil(max(self.prompt_tokens, 0) / max(self.sequences, 1))

    @property
    def kv_need(self) -> int:
        """KV-cache tokens one of its sequences reserves: prompt + max_new_tokens."""
        return self.prompt_per_sequence + max(self.max_new_tokens, 0)


class Placement(NamedTuple):
    """Where a dispatch puts each sequence (`containers`, container ids in sequence order),
    the estimated TTFT of the slowest (`ttft_s`), and whether every one was idle."""

    ttft_s: float
    containers: tuple[str, ...]
    idle: bool


def place(snap: StreamSnapshot, req: StreamRequest) -> Placement | None:
    """Each sequence of `req` on the warm container with a free slot and KV room where its
    first token comes soonest (prefill of the prompts waiting there and its own, then one
    step with one more sequence), first in snapshot order on a tie; None when they do not
    all fit now. The runtimes and the simulator send the sequences where this says."""
    need, own, m = req.kv_need, req.prompt_per_sequence, snap.model
    state = {c.id: [c.free_now(need), c.active, c.pending_prompt_tokens]
             for c in snap.containers if c.free_now(need) > 0}
    was_idle = {c.id: c.active == 0 and c.pending_prompt_tokens == 0 for c in snap.containers}
    chosen: list[str] = []
    worst = 0.0
    for _ in range(max(req.sequences, 1)):
        best, best_s = None, math.inf
        for cid, (free, active, pending) in state.items():
            t = m.prefill_s(pending + own) + m.step_s(active + 1)
            if free > 0 and t < best_s:
                best, best_s = cid, t
        if best is None:
            return None
        s = state[best]
        s[0], s[1], s[2] = s[0] - 1, s[1] + 1, s[2] + own
        chosen.append(best)
        worst = max(worst, best_s)
    return Placement(worst, tuple(chosen), all(was_idle[c] for c in chosen))


def queue_ttft_s(snap: StreamSnapshot, req: StreamRequest) -> float:
    """Estimated TTFT of `req` if it joins the queue (step 3 of the module docstring); inf
    when no live container can ever hold one of its sequences."""
    q, p_ahead, n_ahead = snap.queue.ahead(req.priority)
    need, m = req.kv_need, snap.model
    live = [c for c in snap.containers if c.state in LIVE]
    per = [c.slot_instants(need) for c in live]
    serving = [c for c, ins in zip(live, per, strict=True) if ins]
    if not serving:
        return math.inf
    seqs = q + max(req.sequences, 1)
    full = m.step_s(snap.max_sequences)
    slot = nth_slot_s([t for ins in per for t in ins], seqs, _hold_s(m, req, p_ahead, n_ahead,
                                                                    seqs, full))
    n = len(serving)
    pending = sum(c.pending_prompt_tokens for c in serving)
    prefill = m.prefill_s((p_ahead + pending) / n + req.prompt_per_sequence)
    return slot + prefill + full


def _hold_s(m: GenerationModel, req: StreamRequest, p_ahead: int, n_ahead: int, seqs: int,
            full_s: float) -> float:
    """Seconds one of `seqs` sequences (those queued ahead, `p_ahead` prompt and `n_ahead`
    max_new tokens in all, and the request's) holds its slot: the prefill of a mean prompt
    and the expected tokens of the mean max_new_tokens at a full container's step time."""
    mine = max(req.sequences, 1)
    cap = (n_ahead + req.max_new_tokens * mine) / seqs
    return m.prefill_s((p_ahead + req.prompt_tokens) / seqs) + m.expected_new(cap) * full_s


# ---------------------------------------------------------------- spill targets

class StreamColdSpill:
    """Start another container when one is allowed and its measured cold start, the wait for
    its slots behind its share of the queue ahead, the prefill (its share of the prompt
    tokens ahead and its own, one per-prompt cost) and one step fit the budget."""

    action: ClassVar[Action] = Action.SPILL_COLD
    waits: ClassVar[bool] = True

    def offer(self, snap: StreamSnapshot, req: StreamRequest, ctx: SpillContext
              ) -> Decision | None:
        if ctx.live >= snap.max_containers:
            return None
        need, m, cold = req.kv_need, snap.model, snap.cold_start_s
        slots = min(snap.max_sequences, _fits(snap.kv_cache_tokens, need))
        if slots < 1:
            return None
        q, p_ahead, n_ahead = snap.queue.ahead(req.priority)
        share = 1.0 / (ctx.live + 1)      # the new container takes its share of the queue
        seqs = math.ceil(q * share) + max(req.sequences, 1)
        full = m.step_s(snap.max_sequences)
        hold = _hold_s(m, req, p_ahead, n_ahead, q + max(req.sequences, 1), full)
        ttft = cold + nth_slot_s([0.0] * slots, seqs, hold) + \
            m.prefill_s(p_ahead * share + req.prompt_per_sequence) + \
            m.step_s(min(seqs, snap.max_sequences))
        if ttft > ctx.budget_s:
            return None
        return Decision(Action.SPILL_COLD, f"{ctx.reason}; a cold start ({cold:.2f}s measured) "
                        f"gives a first token in {ttft:.2f}s", est_wait_s=ttft)


# `Route.spill` names -> their strategy for streams: the same names as `decide.SPILLS`.
STREAM_SPILLS: Mapping[str, SpillTarget[StreamSnapshot, StreamRequest]] = MappingProxyType(
    {"cold": StreamColdSpill(), "async": AsyncSpill()})


# ---------------------------------------------------------------- the decision

PRIORITY_NAMES = ("low", "normal", "high")


def most_sequences(snap: StreamSnapshot, priority: int, kv_need: int = 0) -> int:
    """The most sequences one request at `priority` can ever be admitted with on `snap`'s
    endpoint: dispatched whole onto the free slots of every container it may run
    (`container_cap` x the sequences one holds: `max_sequences`, fewer where sequences of
    `kv_need` KV tokens fill its `kv_cache_tokens` first), or queued whole within its
    priority's share of the queue (`QUEUE_SHARE` of `max_queue`). A larger one never
    fits: the queue's room also counts the slots of starting containers, but those come
    and go."""
    per = min(snap.max_sequences, _fits(snap.kv_cache_tokens, kv_need))
    cap = snap.container_cap or snap.max_containers
    return max(cap * per, math.floor(snap.max_queue * QUEUE_SHARE[_prio(priority)]))


def never_admitted(snap: StreamSnapshot, req: StreamRequest) -> Decision | None:
    """The 413 for a request no wait would admit (step 1 of the module docstring): a
    sequence larger than a container's KV budget, or more sequences than `most_sequences`
    at its priority; None otherwise."""
    if req.kv_need > snap.kv_cache_tokens:
        return Decision(Action.SHED, f"prompt_tokens {req.prompt_per_sequence} + "
                        f"max_new_tokens {req.max_new_tokens} = {req.kv_need} exceeds the "
                        f"KV-cache budget of a container ({snap.kv_cache_tokens:.0f} tokens): "
                        "a sequence needs more KV cache than a container has (shorten the "
                        "prompt or lower max_new_tokens)", status=413)
    most = most_sequences(snap, req.priority, req.kv_need)
    if req.sequences <= most:
        return None
    p = _prio(req.priority)
    per = min(snap.max_sequences, _fits(snap.kv_cache_tokens, req.kv_need))
    return Decision(Action.SHED, f"the request makes {req.sequences} sequences; at "
                    f"{PRIORITY_NAMES[p]} priority at most {most} can ever be admitted: "
                    f"{snap.container_cap or snap.max_containers} containers x {per} "
                    f"sequences running, or {QUEUE_SHARE[p]:g} of max_queue "
                    f"{snap.max_queue} queued (split the request)", status=413)


def decide_stream(snap: StreamSnapshot, req: StreamRequest) -> Decision:
    """Dispatch, queue, spill or shed `req` (see the module docstring for the algorithm)."""
    budget = time_left_s(req.deadline_s, snap.now_s, snap.loop_lag_s)
    if budget <= 0:
        return late_shed(req.deadline_s - snap.now_s, snap.loop_lag_s)
    if (refused := never_admitted(snap, req)) is not None:
        return refused
    if req.allow_async and req.sequences > most_sequences(snap, 0, req.kv_need):
        req = replace(req, allow_async=False)   # a job (low priority) of it never starts
    budget *= HEADROOM
    m = snap.model
    live = [c for c in snap.containers if c.state in LIVE]
    plan = place(snap, req) if snap.queue.sequences == 0 else None
    if plan is not None and plan.idle:
        return Decision(Action.DISPATCH, "an idle warm container", est_wait_s=plan.ttft_s)
    alone = m.prefill_s(req.prompt_per_sequence) + m.step_s(1)
    if alone > budget:
        ctx = SpillContext(budget, f"prefill and first step {alone:.3f}s exceed the deadline "
                           f"budget {budget:.3f}s", alone, len(live), 0)
        return spill_or_shed(snap, req, ctx, waiting_ok=False, from_zero=False,
                             spills=STREAM_SPILLS)
    if plan is not None and plan.ttft_s <= budget:
        return Decision(Action.DISPATCH, "a warm container has a free sequence slot",
                        est_wait_s=plan.ttft_s)

    ttft = queue_ttft_s(snap, req)
    p = _prio(req.priority)
    starting_room = sum(c.max_sequences for c in live if c.state not in WARM)
    room = math.floor(snap.max_queue * QUEUE_SHARE[p]) + starting_room
    tenant_cap = max(1, math.ceil((snap.max_queue + starting_room) * TENANT_SHARE))
    queued, _, _ = snap.queue.ahead(p)
    tenants = snap.queue.tenant_sequences
    others = any(t != req.tenant and n for t, n in tenants.items())
    tenant_ok = not others or tenants.get(req.tenant, 0) + req.sequences <= tenant_cap
    fits = ttft <= budget
    if fits and queued + max(req.sequences, 1) <= room and tenant_ok:
        return Decision(Action.QUEUE, f"estimated first token in {ttft:.3f}s fits the budget "
                        f"{budget:.3f}s", est_wait_s=ttft)
    why = (f"estimated first token in {ttft:.3f}s exceeds the budget {budget:.3f}s"
           if not fits else f"queue full for this priority or tenant ({queued} sequences "
           "queued at this priority or above)")
    ctx = SpillContext(budget, why, snap.cold_start_s if not live else ttft, len(live), queued)
    from_zero = not live and "cold" in snap.spill and snap.max_containers > 0
    return spill_or_shed(snap, req, ctx, waiting_ok=True, from_zero=from_zero,
                         spills=STREAM_SPILLS)


__all__ = ["PRIORITY_NAMES", "STREAM_SPILLS", "Placement", "SequenceQueue", "StreamColdSpill",
           "StreamContainer", "StreamRequest", "StreamSnapshot", "decide_stream",
           "most_sequences", "never_admitted", "place", "queue_ttft_s"]
