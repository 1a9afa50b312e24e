"""Cache keys: which endpoint, which build, which item, as one digest.

    item_key(endpoint, build, item, tenant=None) -> bytes     32 bytes (SHA-256)
    canonical(item) -> bytes                         the item's canonical JSON

An item is keyed in its validated wire form (`floodway.routers.schema`: plain JSON, an image
as its base64 text, an array as ``{"b64", "dtype", "shape"}``, a pair as a list, an
`fw.Prompt` with its defaults filled in), encoded as canonical JSON: object keys sorted, no
whitespace, UTF-8, numbers in their shortest round-trip form (orjson; what it refuses,
integers beyond 64 bits, by the standard library with the same rules). Two requests whose
items mean the same after validation (`{"a":1,"b":2}` and `{"b":2,"a":1}`) share a key;
``1`` and ``1.0`` do not (JSON tells them apart, and so might the endpoint).

The digest hashes the endpoint name, the build key and the canonical bytes with their
lengths in front, so no two different triples collide by concatenation; SHA-256 makes an
accidental collision of different items negligible. The build key in it means a new build
never finds an older build's outputs. A `tenant` (the caller's key id, when API keys are
configured) is hashed in as a fourth part: one tenant's entries are never found under
another's, so no tenant learns from a hit what another asked (`floodway.cache.response`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson


def canonical(item: Any) -> bytes:
    """`item` (plain JSON values) as canonical JSON bytes (see the module doc). Raises
    TypeError for a value JSON cannot hold."""
    try:
        return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # Integers beyond 64 bits: the standard library, with the same canonical rules.
        return json.dumps(item, sort_keys=True, ensure_ascii=False,
                          separators=(",", ":")).encode()


def item_key(endpoint: str, build: str, item: Any, tenant: str | None = None) -> bytes:
    """The cache key of `item` sent to `endpoint` while build `build` serves it (for
    `tenant` only, when given): SHA-256 over the parts, each preceded by its length.
    Raises TypeError as `canonical`."""
    h = hashlib.sha256()
    parts = [endpoint.encode(), build.encode(), canonical(item)]
    if tenant is not None:
        parts.append(tenant.encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


__all__ = ["canonical", "item_key"]
