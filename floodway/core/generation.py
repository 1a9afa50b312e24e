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
- Time to first token (TTFT) of a new sequence = the wait for a slot and KV room (none free:
  until enough running sequences end, each after its remaining tokens at the decode rate) +
  the prefill of the prompt tokens queued ahead of it and of its own + one decode step
  (`floodway.routers.decide_stream` combines these).

Each runtime feeds one `GenerationEstimator` per endpoint with what it measures; until it has
samples the priors of `floodway.core.priors` hold (`PREFILL_PRIOR`, `DECODE_STEP_PRIOR`,
`GENERATED_TOKENS_PRIOR`, `PROMPT_TOKENS_PRIOR`). None of this reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    """Prefill and decode speed of one container (see the module docstring).

    `prefill`: seconds to prefill one prompt of `rows` tokens; `step`: seconds of one decode
    step with `rows` active sequences (both `ServiceTime` lines, coefficients >= 0)."""

    prefill: ServiceTime = PREFILL_PRIOR
    step: ServiceTime = DECODE_STEP_PRIOR

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


class GenerationEstimator:
    """Fits of what a runtime measured of one streaming endpoint.

    `record_prefill(prompt_tokens, seconds)`: a prompt's prefill (from the engine, or the
    first-token latency minus one decode step where only that is seen);
    `record_step(active, seconds)`: one decode step with `active` sequences (or the time
    between two chunks of one sequence, with the container's active count then);
    `record_request(prompt_tokens, generated_tokens)`: a finished sequence, for the tokens a
    request costs (`tokens_per_request`). Each fit is the least-squares line of its last
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

    def extend_steps(self, samples: Iterable[tuple[int, float]]) -> None:
        for active, seconds in samples:
            self.record_step(active, seconds)

    @property
    def model(self) -> GenerationModel:
        """The fitted `GenerationModel` (cached until the next sample)."""
        if self._model is None:
            self._model = GenerationModel(
                ServiceTime.fit(list(self.prefills), self.prefill_prior),
                ServiceTime.fit(list(self.steps), self.step_prior))
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
