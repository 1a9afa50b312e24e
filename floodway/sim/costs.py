"""What a simulated request costs a batch: its rows, and its tokens where the runtime counts
them (`floodway.routers.tokens`).

    request_tokens(trace, max_seq_len, service) -> int64 array (n,) | None

As the runtime counts a text (docs/design/simulator.md, "What a request costs").
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
