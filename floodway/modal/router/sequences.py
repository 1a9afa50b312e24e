"""The Modal router's view of a streaming endpoint's sequences: what it measures of them and
what `decide_stream()` sees (`floodway.modal.router.streams` runs the streams).

    book = modal_book(ep, state)                 # one per endpoint, for the router's life
    seq = ModalSequence("7:0", book.cost(item), tenant)
    modal_stream_snapshot(now_s, ep, runners=, inflight=, asked_for_s=, backlog=, tenants=,
                          model=, cold_start_s=, book=book) -> StreamSnapshot

The router sends every input itself (``stream.remote_gen.aio``) and reads every chunk, so it
knows per sequence what the local batcher knows (`floodway.routers.sequences.SequenceBook`):
its cost (estimated prompt tokens, max_new_tokens), whether it has started in a container
(its call header arrived), and the tokens it streamed. What it does not know is which
container runs it: the snapshot spreads the running sequences over Modal's runners, as the
sequences in flight are spread (`modal_stream_snapshot`).
"""

from __future__ import annotations

import math
from typing import Any

from floodway.modal.contract import max_sequences

DEFAULT_MAX_NEW_TOKENS = 256        # fw.Generation.max_new_tokens's default
# The priority a sequence waiting in Modal's input queue is counted at in the book: Modal
# serves its queue in arrival order, so all are one priority (`SequenceQueue.fifo`).
FIFO = 2


def max_new_tokens(ep: Any) -> int:
    """The cap of a sequence's new tokens: ``generation.max_new_tokens`` (256 without one)."""
    return int(getattr(getattr(ep, "generation", None), "max_new_tokens",
                       DEFAULT_MAX_NEW_TOKENS))


class ModalSequence:
    """One input of a stream as a `floodway.routers.sequences.SequenceBook` keeps it (the
    fields of the local batcher's item that the book reads and writes), plus `chunks` (the
    chunks it streamed) and `waiting` (counted in the book's queue: sent to Modal, its call
    header not back yet)."""

    __slots__ = ("chunks", "cost", "id", "last_s", "sent_s", "slot", "tenant", "tokens",
                 "waiting")

    def __init__(self, sid: str, cost: Any, tenant: str = ""):
        self.id, self.cost, self.slot, self.tenant = sid, cost, None, tenant
        self.tokens, self.sent_s, self.last_s, self.chunks = 0, None, None, 0
        self.waiting = False


def modal_book(ep: Any, state: Any) -> Any:
    """A `SequenceBook` that feeds ``state.generation`` (the endpoint's
    `GenerationEstimator` on the router) from the chunks of `ep`'s streams, with the local
    pool's arithmetic (`floodway.routers.sequences`): prefill from the input's start in its
    container to its first chunk, decode steps from the gaps between chunks, each finished
    sequence's tokens. It also keeps the sequences themselves for the snapshot: those waiting
    for their container in its queue (at `FIFO`), those started in ``running``.

    What differs on Modal: an input's start is when its call header arrives (the first thing
    its container yields, so Modal's input queue and the network's way there are left out;
    the way back is in both ends of the sample); and the router does not know which
    container runs a sequence nor how many that one runs, so a decode-step sample is taken
    with the sequences in flight per runner, ``ceil(state.inflight_rows / state.runners)``
    within 1..max_sequences: the mean load of a runner, exact when the runners share the
    sequences evenly (Modal spreads inputs over containers with free `max_inputs`), and
    counting queued inputs too while Modal's backlog is not empty (the runners are then full
    anyway)."""
    from floodway.routers.sequences import SequenceBook

    slots = max_sequences(ep)

    def active(_slot: Any) -> int:
        return min(slots, max(1, math.ceil(state.inflight_rows / max(1, state.runners or 1))))

    return SequenceBook(max_new_tokens(ep), estimator=state.generation, active_of=active)


def runner_sequence_loads(runners: int, inflight: int, running: list[Any], slots: int
                          ) -> list[Any]:
    """`runners` warm containers (`SequenceLoad`, `slots` each) sharing the router's
    `inflight` sequences evenly (the first ones take one more when they do not divide), and
    the `running` ones (`ModalSequence`, started: their call header arrived) dealt out the
    same way, round robin: runner i itemizes ``running[i::runners]``, each with its streamed
    tokens (``generated_tokens``) and what its max_new_tokens leaves (``remaining_tokens``),
    as the local pool does (`floodway.runtime.endpoint_pool`), and the prompt tokens of those
    with no chunk yet (``pending_prompt_tokens``). Its `active` is its share of `inflight`
    (sequences sent and not yet started count too: conservative), never fewer than it
    itemizes."""
    from floodway.core.stream_snapshot import SequenceLoad

    base, extra = divmod(inflight, runners) if runners else (0, 0)
    out = []
    for i in range(runners):
        mine = running[i::runners]
        out.append(SequenceLoad(
            f"runner-{i}", "ready", active=max(base + (i < extra), len(mine)),
            max_sequences=slots,
            remaining_tokens=tuple(max(1, s.cost.max_new_tokens - s.tokens) for s in mine),
            generated_tokens=tuple(s.tokens for s in mine),
            pending_prompt_tokens=sum(s.cost.prompt_tokens for s in mine if not s.chunks)))
    return out


def backlog_queue(backlog: int, waiting: Any, cap: int, tenants: Any) -> Any:
    """Modal's input queue, `backlog` sequences (its stats), as a FIFO `SequenceQueue` with
    the router's in-flight requests per tenant (`tenants`). `waiting`: the book's queue, the
    router's own sequences sent with no call header back yet, whose prompt tokens and
    max_new_tokens it knows. Up to `backlog` of them are taken to be Modal's backlog (when
    there are more, the rest being on their way to a container, their sums are scaled down
    to `backlog`); the backlog beyond them (another router's inputs) counts no prompt tokens
    (unknown) and `cap` new tokens each."""
    from floodway.routers.decide_stream import SequenceQueue

    mine, prompt, new = waiting.ahead(0) if waiting is not None else (0, 0, 0)
    known = min(backlog, mine)
    share = known / mine if mine else 0.0
    return SequenceQueue.fifo(backlog, round(prompt * share),
                              round(new * share) + (backlog - known) * cap, dict(tenants))


def modal_stream_snapshot(now_s: float, ep: Any, *, runners: int, inflight: int,
                          asked_for_s: list[float], backlog: int, tenants: Any,
                          model: Any, cold_start_s: float, book: Any = None) -> Any:
    """`decide_stream()`'s view of streaming endpoint `ep` on Modal (`floodway.core.
    stream_snapshot.build_stream_snapshot`): `runners` warm containers (Modal's stats)
    sharing the router's `inflight` sequences and the running ones of `book` (a
    `modal_book`; None: none itemized, each counted at the ``max_new_tokens`` cap) as
    `runner_sequence_loads` deals them, no KV use reported; one starting container per start
    asked for ``asked_for_s`` seconds ago; and Modal's `backlog` as `backlog_queue` (with the
    prompt tokens of the router's own sequences waiting there). `model`: a
    `GenerationModel`, the router's fit of the streams' chunks (`modal_book`)."""
    from floodway.core.stream_snapshot import SequenceLoad, build_stream_snapshot

    gen = getattr(ep, "generation", None)
    slots, cap = max_sequences(ep), max_new_tokens(ep)
    running = [] if book is None else list(book.running.values())
    loads = runner_sequence_loads(runners, inflight, running, slots)
    loads += [SequenceLoad(f"asked-{i}", "starting", max_sequences=slots, starting_for_s=t)
              for i, t in enumerate(asked_for_s)]
    queue = backlog_queue(backlog, None if book is None else book.queue(), cap, tenants)
    return build_stream_snapshot(now_s, ep, loads, queue, model=model,
                                 cold_start_s=cold_start_s, max_sequences=slots,
                                 kv_cache_tokens=getattr(gen, "kv_cache_tokens", None),
                                 max_new_tokens=cap)


__all__ = ["DEFAULT_MAX_NEW_TOKENS", "FIFO", "ModalSequence", "backlog_queue", "max_new_tokens",
           "modal_book", "modal_stream_snapshot", "runner_sequence_loads"]
