"""The accuracy gate's metrics: a reduced-precision graph's outputs against float32's on the
task's parity cases (`floodway.build.precision_gate`). numpy only.

- ``cosine`` (embeddings: feature-extraction): each row's hidden states mean-pooled over its
  attention mask (the sentence-transformers pooling, as modal_app.py's endpoint does), then
  the cosine of the reduced row with the float32 row; the gate takes the smallest.
- ``top1`` (logits: text-, token-, image-classification): the share of rows (of unpadded
  tokens, for per-token logits) whose argmax class is the same, and the largest absolute
  logit difference divided by the largest absolute float32 logit (``max_rel_err``: scale-free,
  since a trained head's logits span +-10 where an untrained one's stay near 0).
"""

from __future__ import annotations

import numpy as np

COSINE, TOP1 = "cosine", "top1"
METRICS = (COSINE, TOP1)


def mean_pool(hidden: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """(rows, seq, H) hidden states -> (rows, H) means over the positions where `mask`
    (rows, seq) is 1 (all positions when None)."""
    h = hidden.astype(np.float64)
    if mask is None:
        return h.mean(axis=1)
    m = mask.astype(np.float64)[..., None]
    return (h * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)


def row_cosines(got: np.ndarray, want: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Cosine per row of the pooled embeddings (`mean_pool` for 3-d outputs, the rows as they
    are for 2-d ones): (rows,) in [-1, 1]; a zero row counts as cosine 0."""
    if got.ndim == 3:
        got, want = mean_pool(got, mask), mean_pool(want, mask)
    a = got.reshape(len(got), -1).astype(np.float64)
    b = want.reshape(len(want), -1).astype(np.float64)
    norm = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(norm > 0, (a * b).sum(axis=1) / np.where(norm > 0, norm, 1), 0.0)


def top1_agreement(got: np.ndarray, want: np.ndarray, mask: np.ndarray | None) -> float:
    """Share of rows (or unpadded tokens, for (rows, seq, labels) logits with `mask`) whose
    argmax over the last axis agrees, in [0, 1]."""
    same = got.argmax(axis=-1) == want.argmax(axis=-1)
    if mask is not None and same.ndim == 2:
        keep = mask.astype(bool)
        return float(same[keep].mean()) if keep.any() else 1.0
    return float(same.mean()) if same.size else 1.0


def max_rel_err(got: np.ndarray, want: np.ndarray, mask: np.ndarray | None) -> float:
    """Largest |got - want| over the largest |want| (unpadded positions only, for
    (rows, seq, labels) logits with `mask`); 0 when both are empty."""
    diff = np.abs(got.astype(np.float64) - want)
    ref = np.abs(want.astype(np.float64))
    if mask is not None and diff.ndim == 3:
        keep = mask.astype(bool)
        diff, ref = diff[keep], ref[keep]
    if not diff.size:
        return 0.0
    return float(diff.max() / max(float(ref.max()), 1e-12))


def measure(metric: str, got: np.ndarray, want: np.ndarray, mask: np.ndarray | None
            ) -> dict[str, float]:
    """The gate's measurements of one case for `metric` (``cosine``: {"cosine": smallest row
    cosine}; ``top1``: {"top1_agreement", "max_rel_err"}). Raises ValueError for another
    metric."""
    if metric == COSINE:
        return {"cosine": float(row_cosines(got, want, mask).min())}
    if metric == TOP1:
        return {"top1_agreement": top1_agreement(got, want, mask),
                "max_rel_err": max_rel_err(got, want, mask)}
    raise ValueError(f"unknown precision metric {metric!r}; known: {METRICS}")


__all__ = ["COSINE", "METRICS", "TOP1", "max_rel_err", "mean_pool", "measure", "row_cosines",
           "top1_agreement"]
