"""What a simulated request costs a batch: its rows, and its tokens where the runtime counts
them (`floodway.routers.tokens`).

    request_tokens(trace, max_seq_len, service) -> int64 array (n,) | None

The runtime estimates each text's tokens at admission and its service line is fitted on
padded tokens (`floodway.routers.service.ServiceTime`). A per-request trace with a
``ContextTokens`` column says how long each request's text is; for an endpoint that takes
text, a request then costs that many tokens plus the tokenizer's special tokens
(`floodway.routers.tokens.SPECIAL_TOKENS`), at most the build's `max_seq_len` and at least 1,
as `floodway.routers.tokens.item_tokens` counts a text. Only where the service model has a
per-token term: without one tokens change no estimate and no batch time, and the simulator
costs rows alone (and keeps its exact fast path).
"""

from __future__ import annotations

import numpy as np

from floodway.routers.service import ServiceTime
from floodway.routers.tokens import SPECIAL_TOKENS
from floodway.sim.trace import Trace


def request_tokens(trace: Trace, max_seq_len: int | None, service: ServiceTime
                   ) -> np.ndarray | None:
    """Each request's tokens (int64, shape (n,)), or None where requests cost rows alone:
    no `max_seq_len` (the endpoint does not take text), no token column in the trace, or no
    per-token term in `service`."""
    if not max_seq_len or trace.prompt_tokens is None or not service.per_token_s > 0:
        return None
    tok = np.asarray(trace.prompt_tokens, dtype=np.int64) + SPECIAL_TOKENS
    return np.ascontiguousarray(np.clip(tok, 1, int(max_seq_len)), dtype=np.int64)


__all__ = ["request_tokens"]
