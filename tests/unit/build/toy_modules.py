"""Users' own PyTorch modules for the TorchModel tests, built by factories named as
``"tests.unit.build.toy_modules:<factory>"`` (seeded, untrained: parity only compares
ONNX Runtime with PyTorch on the same weights)."""

from __future__ import annotations

import torch
from torch import nn


def conv_net() -> nn.Module:
    """(N, 3, 16, 16) images -> (N, 4) logits."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4))


class Tagger(nn.Module):
    """Token ids and per-token weights, both (N, seq) -> {"pooled": (N, 2), "tokens": (N, seq,
    4)}: two inputs, a dynamic sequence axis, outputs returned as a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 2)

    def forward(self, ids: torch.Tensor, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.emb(ids) * weights[..., None]
        return {"pooled": self.proj(h.mean(dim=1)), "tokens": h}


def tagger() -> nn.Module:
    torch.manual_seed(1)
    return Tagger()


def broken() -> nn.Module:
    raise RuntimeError("no weights here")
