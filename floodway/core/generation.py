"""The service model of a generative (streaming) endpoint, and its estimator.

    model = GenerationEstimator().model       # prefill fit + decode-step fit -> GenerationModel
    model.prefill_s(tokens), model.step_s(active), model.tokens_per_s(active)
    estimate_prompt_tokens(text), estimate_message_tokens(messages)
    nth_slot_s(free_at_s, k, hold_s)          # when the k-th sequence slot frees
    measured_generation(cold, gen, max_sequences) -> Measured   (for `desired()`)

The model (all times in seconds, token counts in model tokens):

- A container runs up to `max_sequences` sequences at once (its slots) under a KV-cache
  budget of `kv_cache_tokens`: an admitted sequence reserves its prompt plus its
  `max_new_tokens` (vLLM, Kwon et al., SOSP 2023, allocates KV blocks on demand; reserving
  the whole sequence up front is the conservative bound that can never preempt).
- Iteration-level scheduling (Orca, Yu et al., OSDI 2022): the engine runs one decode step at
  a time; a step produces one token for every active sequence, new sequences join between
  steps (after their prompt is prefilled) and finished ones leave without waiting for the
  rest. A step with `active` sequences takes ``per_batch_s + per_row_s * active`` seconds (a
  least-squares fit of measured steps, `ServiceTime.fit` with rows = active sequences), so a
  container decodes ``active / step_s(active)`` tokens per second.
- Prefill of one prompt of `p` tokens takes ``per_batch_s + per_row_s * p`` seconds (the same
  fit over measured prompts, rows = prompt tokens): ``1 / per_row_s`` prompt tokens/s.
- How long a sequence runs: its max_new_tokens is only an upper bound (most stop early, at
  an end-of-sequence token or a stop string). The model keeps the generated tokens of the
  last finished sequences (`lengths`, their empirical distribution) and expects
  E[min(N, max_new_tokens)] of one not yet started and, of one that has generated g, the
  mean residual life E[min(N, max_new_tokens) - g | N > g] (at least 1); with nothing
  measured, or past every measured length, only max_new_tokens bounds it. The KV-cache
  reservation stays prompt + max_new_tokens: the engine reserves that much.
- Time to first token (TTFT) of a new sequence = the wait for a slot and KV room (none free:
  until enough running sequences end, each after its expected remaining tokens at the decode
  rate) + the prefill of the prompt tokens queued ahead of it and of its own + one decode
  step (`floodway.routers.decide_stream` combines these).

Each runtime feeds one `GenerationEstimator` per endpoint with what it measures; until it has
samples the priors of `floodway.core.priors` hold (`PREFILL_PRIOR`, `DECODE_STEP_PRIOR`,
`GENERATED_TOKENS_PRIOR`, `PROMPT_TOKENS_PRIOR`). None of this reads a clock.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from floodway.core.estimators import ColdStartEstimator
from floodway.core.priors import (
    DECODE_STEP_PRIOR,
    GENERATED_TOKENS_PRIOR,
    PREFILL_PRIOR,
    PROMPT_TOKENS_PRIOR,
)
from floodway.routers.decide import ServiceTime
from floodway.warmers.target import Measured

# OpenAI's rule of thumb: one token is about 4 characters of common English text
# (https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them).
CHARS_PER_TOKEN = 4
# Chat formatting per message and for priming the reply, as OpenAI's cookbook counts it for
# its chat models ("How to count tokens with tiktoken": 3 per message, 3 for the reply).
MESSAGE_OVERHEAD_TOKENS = 3
REPLY_OVERHEAD_TOKENS = 3
# Samples kept per fit: prompts are few per request, steps many per second; enough to see a
# few sizes, few enough to follow a change (another build, a loaded machine) within seconds.
PREFILL_SAMPLES = 64
STEP_SAMPLES = 256
REQUEST_SAMPLES = 256
# Float slack when counting how often a slot has freed by an instant (k * hold / hold may
# round below k).
EPS = 1e-9


def estimate_prompt_tokens(text: str, cap: int | None = None) -> int:
    """Tokens of `text` before the engine tokenizes it: ceil(characters / 4) (OpenAI's rule of
    thumb for English), at least 1, at most `cap` (the model's context, when known).

    The cap keeps an estimate of text that tokenizes far denser than prose (long runs of
    whitespace or repeated characters, which tokenizers merge) from refusing a prompt for a KV
    budget it would really fit; the engine counts exactly and refuses what does not fit."""
    n = max(1, math.ceil(len(text) / CHARS_PER_TOKEN))
    return n if cap is None else max(1, min(n, int(cap)))


def estimate_message_tokens(messages: Sequence[Mapping[str, Any]], cap: int | None = None
                            ) -> int:
    """Tokens of a chat (`{"role", "content"}` dicts): each message's role and content at 4
    characters per token plus `MESSAGE_OVERHEAD_TOKENS`, plus `REPLY_OVERHEAD_TOKENS`; at
    most `cap`. A content that is not a str counts by its str()."""
    n = REPLY_OVERHEAD_TOKENS
    for m in messages:
        for key in ("role", "content"):
            v = m.get(key) or ""
            n += math.ceil(len(v if isinstance(v, str) else str(v)) / CHARS_PER_TOKEN)
        n += MESSAGE_OVERHEAD_TOKENS
    return n if cap is None else max(1, min(n, int(cap)))


@dataclass(frozen=True)
class GenerationModel:
    """Prefill and decode speed of one container, and how long its sequences run (see the
    module docstring).

    `prefill`: seconds to prefill one prompt of `rows` tokens; `step`: seconds of one decode
    step with `rows` active sequences (both `ServiceTime` lines, coefficients >= 0);
    `lengths`: generated tokens of recently finished sequences, ascending (empty: none
    measured, and every sequence is assumed to run to its max_new_tokens)."""

    prefill: ServiceTime = PREFILL_PRIOR
    step: ServiceTime = DECODE_STEP_PRIOR
    lengths: tuple[int, ...] = ()
    # Prefix sums of `lengths` (len + 1 entries), for expectations in O(log n).
    _sums: tuple[int, ...] = field(default=(0,), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_sums", tuple(itertools.accumulate(self.lengths, initial=0)))

    def prefill_s(self, tokens: float, prompts: float = 1.0) -> float:
        """Seconds to prefill `prompts` prompts holding `tokens` prompt tokens in all."""
        return self.prefill.per_row_s * max(tokens, 0.0) + \
            self.prefill.per_batch_s * max(prompts, 0.0)

    def step_s(self, active: int) -> float:
        """Seconds of one decode step with `active` sequences (at least one)."""
        return self.step.seconds(max(1, int(active)))

    def tokens_per_s(self, active: int) -> float:
        """Tokens one container decodes per second with `active` sequences (inf for a free
        step: a fit of zeros)."""
        s = self.step_s(active)
        return max(1, int(active)) / s if s > 0 else math.inf

    @property
    def prefill_tokens_per_s(self) -> float:
        """Prompt tokens prefilled per second, beyond the per-prompt cost (inf if free)."""
        a = self.prefill.per_row_s
        return 1.0 / a if a > 0 else math.inf

    def expected_new(self, cap: float) -> float:
        """Expected generated tokens of a sequence not yet started that may generate `cap`
        (its max_new_tokens): E[min(N, cap)] over the measured lengths N; `cap` itself
        without any (the upper bound, until something was measured)."""
        return self.expected_remaining(0, cap)

    def expected_remaining(self, generated: int, cap: float) -> float:
        """Expected tokens still to come of a running sequence that has generated
        `generated` tokens of at most `cap`: the mean residual life of the measured lengths,
        E[min(N, cap) - g | N > g] (only sequences longer than g have one still running),
        at least 1 and at most cap - g. Without a measured length above g (none measured,
        or this one is longer than all of them) nothing bounds it but `cap`: cap - g."""
        g, left = max(0, int(generated)), max(1.0, float(cap) - max(0, int(generated)))
        xs = self.lengths
        i = bisect.bisect_right(xs, g)              # lengths[i:] are > g
        n = len(xs) - i
        if n == 0 or not math.isfinite(cap):
            return left
        j = bisect.bisect_right(xs, cap, lo=i)      # lengths[i:j] are <= cap
        total = (self._sums[j] - self._sums[i]) + (len(xs) - j) * float(cap)
        return min(left, max(1.0, total / n - g))

    def expected_ends(self, generated: Sequence[int], caps: Sequence[int],
                      exact: Sequence[float] = ()) -> list[float]:
        """Expected remaining tokens of the running sequences that have generated
        ``generated[i]`` of at most ``caps[i]`` each, and of those whose remaining tokens are
        taken as known (`exact`), as order statistics: entry k is the expected k-th smallest
        (when the k-th of them ends), ascending.

        Each one's remaining tokens are drawn from the measured lengths longer than what it
        generated, min(N, cap) - g (at least 1; without such a length, cap - g for sure),
        independently; E[X_(k)] = sum over t of P(fewer than k have ended by t), from the
        Poisson-binomial distribution of how many have (David & Nagaraja, Order Statistics,
        3rd ed., 2003, ch. 5). The first slot frees much sooner than any one sequence's
        expected end, the last later: taking each one's expectation alone would not say so.
        """
        n = len(generated) + len(exact)
        if n == 0:
            return []
        xs = np.asarray(self.lengths, dtype=np.float64)
        supports = [np.array([max(1.0, float(x))]) for x in exact]
        for g, cap in zip(generated, caps, strict=True):
            g, left = max(0, int(g)), max(1, int(cap) - max(0, int(g)))
            longer = xs[xs > g]
            supports.append(np.sort(np.clip(np.minimum(longer, g + left) - g, 1, left))
                            if longer.size else np.array([float(left)]))
        grid = np.unique(np.concatenate(supports))
        # ended[i, t]: P(sequence i has ended within grid[t] tokens).
        ended = np.stack([np.searchsorted(x, grid, side="right") / x.size for x in supports])
        count = np.zeros((grid.size, n + 1))
        count[:, 0] = 1.0
        for p in ended:                              # Poisson-binomial, one sequence at a time
            count[:, 1:] = count[:, 1:] * (1 - p[:, None]) + count[:, :-1] * p[:, None]
            count[:, 0] *= 1 - p
        fewer = np.cumsum(count, axis=1)[:, :n]     # [t, k-1]: P(fewer than k ended by t)
        gaps = np.diff(grid)
        return [float(grid[0] + gaps @ fewer[:-1, k]) for k in range(n)]


class GenerationEstimator:
    """Fits of what a runtime measured of one streaming endpoint.

    `record_prefill(prompt_tokens, seconds)`: a prompt's prefill (from the engine, or the
    first-token latency minus one decode step where only that is seen);
    `record_step(active, seconds)`: one decode step with `active` sequences (or the time
    between two chunks of one sequence, with the container's active count then);
    `record_request(prompt_tokens, generated_tokens)`: a finished sequence, for the tokens a
    request costs (`tokens_per_request`) and how long sequences run (`model.lengths`).
    Each fit is the least-squares line of its last
    samples (`ServiceTime.fit`), the prior until the first one; refitted when read."""

    def __init__(self, prefill_prior: ServiceTime = PREFILL_PRIOR,
                 step_prior: ServiceTime = DECODE_STEP_PRIOR,
                 generated_prior: float = GENERATED_TOKENS_PRIOR,
                 prompt_prior: float = PROMPT_TOKENS_PRIOR):
        self.prefill_prior, self.step_prior = prefill_prior, step_prior
        self.generated_prior, self.prompt_prior = float(generated_prior), float(prompt_prior)
        self.prefills: deque[tuple[int, float]] = deque(maxlen=PREFILL_SAMPLES)
        self.steps: deque[tuple[int, float]] = deque(maxlen=STEP_SAMPLES)
        self.requests: deque[tuple[int, int]] = deque(maxlen=REQUEST_SAMPLES)
        self._model: GenerationModel | None = None

    def record_prefill(self, prompt_tokens: int, seconds: float) -> None:
        if prompt_tokens >= 0 and seconds >= 0:
            self.prefills.append((int(prompt_tokens), float(seconds)))
            self._model = None

    def record_step(self, active: int, seconds: float) -> None:
        if active >= 1 and seconds >= 0:
            self.steps.append((int(active), float(seconds)))
            self._model = None

    def record_request(self, prompt_tokens: int, generated_tokens: int) -> None:
        self.requests.append((max(0, int(prompt_tokens)), max(0, int(generated_tokens))))
        self._model = None

    def extend_steps(self, samples: Iterable[tuple[int, float]]) -> None:
        for active, seconds in samples:
            self.record_step(active, seconds)

    @property
    def model(self) -> GenerationModel:
        """The fitted `GenerationModel` (cached until the next sample)."""
        if self._model is None:
            self._model = GenerationModel(
                ServiceTime.fit(list(self.prefills), self.prefill_prior),
                ServiceTime.fit(list(self.steps), self.step_prior),
                tuple(sorted(g for _, g in self.requests)))
        return self._model

    def tokens_per_request(self) -> float:
        """Mean generated tokens of the recorded requests (the prior without any)."""
        r = self.requests
        return sum(g for _, g in r) / len(r) if r else self.generated_prior

    def prompt_tokens_per_request(self) -> float:
        """Mean prompt tokens of the recorded requests (the prior without any)."""
        r = self.requests
        return sum(p for p, _ in r) / len(r) if r else self.prompt_prior


def measured_generation(cold: ColdStartEstimator, gen: GenerationEstimator,
                        max_sequences: int) -> Measured:
    """What the warm-pool policies read for a streaming endpoint (`Measured.from_tokens`): a
    container's tokens/s with all `max_sequences` sequences running, and a request's cost in
    generated tokens plus the prefill of a mean prompt."""
    model = gen.model
    return Measured.from_tokens(cold.estimate_s(), model.tokens_per_s(max_sequences),
                                max_sequences, gen.tokens_per_request(),
                                model.prefill_s(gen.prompt_tokens_per_request()))


def nth_slot_s(free_at_s: Sequence[float], k: int, hold_s: float) -> float:
    """When the `k`-th (1-based) sequence slot frees, in seconds from now.

    Slot j frees at ``free_at_s[j]``; a sequence that takes a slot holds it `hold_s` seconds,
    so slot j frees again at ``free_at_s[j] + m * hold_s`` (m = 1, 2, ...). The answer is the
    k-th of these instants in time order: the least T with at least k of them at or before T
    (found by bisection, then snapped to the instant itself). inf with no slot or k < 1.
    Monotone: never earlier for a larger k, a larger `hold_s` or later `free_at_s`."""
    times = sorted(free_at_s)
    if not times or k < 1 or not math.isfinite(times[0]):
        return math.inf
    hold = max(hold_s, 1e-9)
    if k <= len(times) and times[k - 1] <= times[0] + hold:
        return times[k - 1]        # no slot can free twice before it

    def count(t: float) -> int:
        return sum(1 + math.floor((t - x) / hold + EPS) for x in times if x <= t)

    lo, hi = times[0], times[0] + (k - 1) * hold
    if k <= len(times):
        hi = min(hi, times[k - 1])
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if count(mid) >= k:
            hi = mid
        else:
            lo = mid
    # The latest instant at or before `hi`: the k-th itself, not a point of the bisection.
    return max(x + math.floor((hi - x) / hold + EPS) * hold for x in times if x <= hi)


__all__ = ["CHARS_PER_TOKEN", "GenerationEstimator", "GenerationModel", "estimate_message_tokens",
           "estimate_prompt_tokens", "measured_generation", "nth_slot_s"]
