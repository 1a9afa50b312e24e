"""What the GPU class of a unit and its callers (the router, the job function, the warmers,
`to_modal`) agree on, so that no side reads it from another.

- `class_name(unit)`: the Modal class of a unit (an endpoint, or one lane of it).
- Its one method: ``predict`` (``@modal.batched``, one row per call) or, for a streaming
  endpoint (`is_streaming`), the generator ``stream(item)``.
- Its answers: a row or a stream that failed alone is ``{ITEM_ERROR: "Type: message"}``; a
  stream's first message is ``{CALL_HEADER: "<function call id>"}``.
- `container_slots(ep)`: the inputs one container takes at once, declared as the class's
  ``@modal.concurrent`` by `to_modal` and modelled per runner by the router.
- `store_root(artifacts_path)`: where a container reads the builds.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any

from floodway.core.snapshot import pipeline_slots

# A per-row output of the GPU class that stands for "this item raised" (a bad item fails
# alone; raising would fail every row of its Modal batch): {ITEM_ERROR: "Type: message"}.
ITEM_ERROR = "__floodway_item_error__"
# The first message of every stream: {CALL_HEADER: function call id}.
CALL_HEADER = "__floodway_call__"
# Sequences one container runs at once when the endpoint declares no fw.Generation (the
# default of fw.Generation.max_sequences).
DEFAULT_MAX_SEQUENCES = 8


def class_name(unit: str) -> str:
    """CamelCase Modal class name of a unit: an endpoint, ``embed`` -> ``Embed``,
    ``a-b_c`` -> ``ABC``, or a lane of one (`floodway.routers.lanes.unit_key`),
    ``embed:short`` -> ``EmbedShort``: '-', '_' and ':' separate words."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_:]", unit) if part)


def is_streaming(ep: Any) -> bool:
    """Whether `ep` is a streaming endpoint: ``Endpoint.streaming`` where it exists, else
    whether its function is a (sync or async) generator function."""
    flag = getattr(type(ep), "streaming", None)
    if flag is not None:
        return bool(ep.streaming)
    return inspect.isgeneratorfunction(ep.fn) or inspect.isasyncgenfunction(ep.fn)


def max_sequences(ep: Any) -> int:
    """Sequences one container of streaming endpoint `ep` runs at once:
    ``generation.max_sequences``, `DEFAULT_MAX_SEQUENCES` without a fw.Generation."""
    generation = getattr(ep, "generation", None)
    return int(getattr(generation, "max_sequences", DEFAULT_MAX_SEQUENCES))


def container_slots(ep: Any) -> int:
    """Inputs one container of endpoint `ep` runs at once on Modal: the batches, `pipeline_slots`
    of its ``Route.max_inflight_per_container``; for a streaming endpoint the sequences,
    `max_sequences`. `to_modal` declares it as the class's input concurrency and
    `ModalBackend` models each runner with it, so the two cannot differ."""
    if is_streaming(ep):
        return max_sequences(ep)
    return pipeline_slots(ep.route.max_inflight_per_container)


def store_root(artifacts_path: str) -> Path:
    """The artifact store's root in a container: ``FLOODWAY_STORE`` where set, else the
    artifact Volume's mount path `artifacts_path`."""
    return Path(os.environ.get("FLOODWAY_STORE") or artifacts_path)


__all__ = ["CALL_HEADER", "DEFAULT_MAX_SEQUENCES", "ITEM_ERROR", "class_name",
           "container_slots", "is_streaming", "max_sequences", "store_root"]
