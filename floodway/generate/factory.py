"""An `Engine` for a loaded text-generation build (`floodway.Loaded.generate` makes one on
first use)."""

from __future__ import annotations

from typing import Any

from floodway.errors import ArtifactError
from floodway.generate.engine import Engine, LoadListener
from floodway.generate.kv import KVSpec
from floodway.generate.requests import RequestLimits, Tokenize
from floodway.generate.scheduler import Limits

TOKENIZER_DIR = "tokenizer"


def engine_for(loaded: Any, *, max_sequences: int = 8, kv_cache_tokens: int | None = None,
               max_new_tokens: int = 256, on_load: LoadListener | None = None) -> Engine:
    """The engine of `loaded` (a `floodway.Loaded` of a text-generation build).

    `max_sequences`: sequences running at once; `kv_cache_tokens`: cache positions they may
    reserve together (None: max_sequences x the build's max_seq_len); `max_new_tokens`: the
    default and cap of a request's. Raises ArtifactError for a build of another task, or
    one without its generation record (built before this floodway).
    """
    manifest = loaded.manifest
    info = getattr(manifest, "generation", None)
    if loaded.task != "text-generation" or info is None:
        raise ArtifactError(f"{loaded.artifact_dir} is a {loaded.task!r} build without a "
                            "generation record: generate() needs a text-generation build "
                            "(rebuild with task='text-generation')")
    context = loaded.max_seq_len
    capacity = kv_cache_tokens if kv_cache_tokens is not None else max_sequences * context
    spec = KVSpec(info.layers, info.heads, info.head_dim, info.vocab_size)
    return Engine(loaded.runner, spec,
                  tokenize=Tokenize(loaded.artifact_dir / TOKENIZER_DIR, info.bos_token_id),
                  eos=info.eos_token_ids, limits=Limits(max_sequences, capacity),
                  requests=RequestLimits(max_new_tokens, min(context, capacity)),
                  on_load=on_load)


__all__ = ["engine_for"]
