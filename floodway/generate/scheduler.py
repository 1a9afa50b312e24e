"""Admission between decode steps: which waiting sequences join the running batch.

A sequence reserves its whole key/value cache when it is admitted: its prompt plus the most
tokens it may generate (``max_new_tokens``), so that a running sequence never runs out of
cache mid-answer (no preemption, no recomputation). Admission is first come, first served:
the head of the queue waits while it does not fit, and nothing behind it overtakes it, so a
long request is never starved by a stream of short ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """`max_sequences`: sequences running at once; `kv_capacity_tokens`: cache positions
    reserved by them together, at most."""

    max_sequences: int
    kv_capacity_tokens: int

    def __post_init__(self) -> None:
        if self.max_sequences < 1 or self.kv_capacity_tokens < 1:
            raise ValueError(f"limits must be positive: {self}")


def admit(waiting: Sequence[int], running: int, reserved_tokens: int, limits: Limits) -> int:
    """How many of `waiting` (each one's reservation in tokens, queue order) join now,
    from the head: each while one more sequence fits under `limits.max_sequences` and its
    reservation under `limits.kv_capacity_tokens`, given `running` sequences holding
    `reserved_tokens`. Stops at the first that does not fit."""
    n = 0
    for need in waiting:
        if running + n + 1 > limits.max_sequences:
            break
        if reserved_tokens + need > limits.kv_capacity_tokens:
            break
        reserved_tokens += need
        n += 1
    return n


def fits_ever(need: int, limits: Limits) -> bool:
    """Whether a reservation of `need` tokens could be admitted at all (into an idle
    engine)."""
    return need <= limits.kv_capacity_tokens


__all__ = ["Limits", "admit", "fits_ever"]
