"""The graph module of a decoder with its key/value cache (`floodway.tasks.generation`):
flat past tensors in, logits and flat present tensors out, so that `torch.onnx.export`
(TorchScript) traces a graph whose cache is plain named inputs and outputs.

    graph(input_ids, attention_mask, position_ids, past_0_key, past_0_value, ...)
        -> (logits, present_0_key, present_0_value, ...)

transformers 5 takes the cache as a `DynamicCache` (the keyword ``cache``, formerly
``past_key_values``); the wrapper builds one from the flat tensors and flattens the one the
model returns. Imports torch: build side (and the PyTorch load path) only.
"""

from __future__ import annotations

import inspect
from typing import Any


def _cache_keyword(model: Any) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _make_cache(pairs: list[tuple[Any, Any]], config: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(ddp_cache_data=pairs, config=config)
    except TypeError:       # transformers 4.x
        return DynamicCache.from_legacy_cache(tuple(pairs))


def _flatten(cache: Any, layers: int) -> list[Any]:
    out: list[Any] = []
    for i in range(layers):
        if hasattr(cache, "layers"):
            out += [cache.layers[i].keys, cache.layers[i].values]
        else:               # transformers 4.x: cache[i] is (key, value)
            out += list(cache[i])
    return out


def kv_graph_module(model: Any, layers: int) -> Any:
    """Wrap a causal LM (eval mode, eager attention) as the flat-cache graph above."""
    import torch

    keyword = _cache_keyword(model)

    class KVGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any,
                    *past: Any) -> Any:
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(layers)]
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, use_cache=True,
                             **{keyword: _make_cache(pairs, self.model.config)})
            cache = out.get("cache") if "cache" in out else out.past_key_values
            return (out.logits, *_flatten(cache, layers))

    return KVGraph().eval()


__all__ = ["kv_graph_module"]
