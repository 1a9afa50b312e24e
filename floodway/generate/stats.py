"""The engine's counters, for metrics (tokens/s, cancelled sequences, step times). Written by
the engine's thread only; read from any (each field is one int or float)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Stats:
    """Totals since the engine started. `*_s`: seconds spent in graph calls (so
    completion_tokens / decode_s is the decode rate while decoding); `finished`: by
    finish_reason; `cancelled`: sequences dropped because their consumer left or cancelled;
    `failed`: sequences ended by an error."""

    steps: int = 0
    prefills: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    finished_stop: int = 0
    finished_length: int = 0
    cancelled: int = 0
    failed: int = 0

    def snapshot(self) -> dict[str, float]:
        return asdict(self)


__all__ = ["Stats"]
