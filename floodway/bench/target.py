"""What `floodway bench` replays against, and what each request's item is.

    target_of(app, endpoint, input_json, deadline_ms, max_words, headers) -> Target
    item_name(annotation) -> str        e.g. "fw.Array[np.float32, (3, 224, 224)]"

An APP's endpoint says what it takes in its function's annotation: text (``str``) and
`fw.Prompt` items are made from the trace, anything else needs ``--input-json`` (the error
names the type as it is written in the app). A URL's router says it in its
``/openapi.json`` (`floodway.http.openapi`): bench reads the endpoint's item schema first,
sends prompts to a prompt endpoint, and refuses to send text to an endpoint that does not
take text, naming what it takes; a router whose document cannot be read (none, or behind
a key bench was not given) is sent text, and the failures report says what came back.
"""

from __future__ import annotations

import json
import os
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any

from floodway.errors import FloodwayError

OPENAPI_TIMEOUT_S = 10.0
INPUT_JSON_HINT = ("give one with --input-json (floodway serve --show-example prints one "
                   "for the app)")


@dataclass(frozen=True)
class Target:
    """Where to replay: `url` (None: serve `app` locally), the endpoint, how its items are
    made and the deadline in ms; for an app, its endpoint's config (`floodway.bench.
    runfile.config_doc`: max_seq_len sizes the texts' token estimates)."""

    app: str | None
    url: str | None
    endpoint: str
    inputs: Any
    deadline_ms: float
    config: dict | None = None


def item_name(t: Any) -> str:
    """An item annotation as it is written in an app: ``str``, ``tuple[str, str]`` (text
    pairs), ``fw.Image``, ``fw.Array[np.float32, (3, 224, 224)]``, ``fw.Prompt``, ...;
    never the bare ``Annotated`` its metadata hides in."""
    from floodway.functions.items import ArraySpec, ImageSpec, spec_of
    from floodway.functions.prompts import Prompt

    spec = spec_of(t)
    if isinstance(spec, ImageSpec):
        return "fw.Image"
    if isinstance(spec, ArraySpec):
        dims = ", ".join("None" if d is None else str(d) for d in spec.shape)
        return f"fw.Array[np.{spec.dtype}, ({dims}{',' if len(spec.shape) == 1 else ''})]"
    if t is Prompt:
        return "fw.Prompt"
    if t is Any:
        return "Any"
    if t is None or t is type(None):
        return "None"
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Annotated:
        return item_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(item_name(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is tuple and args == (str, str):
        return "tuple[str, str] (text pairs)"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else item_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(t, "__name__", repr(t))


def _app_target(app: str, endpoint: str | None, input_json: Any,
                deadline_ms: float | None, max_words: int) -> Target:
    """The Target of an app file: its endpoint (the only one, or `endpoint`), its item kind
    from the function's annotation, its Route.timeout_s as the default deadline."""
    from floodway.bench.plan import Inputs
    from floodway.bench.runfile import config_doc
    from floodway.config import Generation
    from floodway.functions.discover import load_app
    from floodway.functions.prompts import Prompt
    from floodway.modal.extra import NO_MODAL_ENV

    os.environ.setdefault(NO_MODAL_ENV, "1")      # the app's Modal objects are not used
    spec = app if endpoint is None or "::" in app else f"{app}::{endpoint}"
    _, eps = load_app(spec)
    if len(eps) != 1:
        raise FloodwayError(f"{app} has {len(eps)} endpoints ({', '.join(e.name for e in eps)})"
                            "; pick one with --endpoint NAME")
    ep = eps[0]
    if input_json is not None:
        inputs = Inputs("json", input_json, max_words)
    elif ep.input_type is str:
        inputs = Inputs("text", max_words=max_words)
    elif ep.input_type is Prompt:
        inputs = Inputs("prompt", max_words=max_words,
                        max_new_tokens=(ep.generation or Generation()).max_new_tokens)
    else:
        raise FloodwayError(f"endpoint {ep.name} takes {item_name(ep.input_type)} items, not "
                            f"text: {INPUT_JSON_HINT}")
    return Target(spec, None, ep.name, inputs,
                  deadline_ms if deadline_ms is not None else ep.route.timeout_s * 1000,
                  config_doc(ep))


def _short(text: str, most: int = 160) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def describe_schema(schema: Any) -> str:
    """A few words on an item's JSON schema (as `floodway.http.openapi` writes it)."""
    if not isinstance(schema, dict):
        return "any JSON"
    if isinstance(schema.get("description"), str):
        return _short(schema["description"])
    parts = schema.get("allOf") or schema.get("anyOf") or schema.get("oneOf")
    if isinstance(parts, list) and parts:
        return describe_schema(parts[0])
    if isinstance(schema.get("$ref"), str):
        return schema["$ref"].rsplit("/", 1)[-1]
    pre = schema.get("prefixItems")
    if isinstance(pre, list):
        inner = ", ".join(describe_schema(p) for p in pre)
        return f"[{inner}]" + (" (text pairs)" if inner == "str, str" else "")
    if schema.get("type") == "string" and len(schema) == 1:
        return "str"
    return _short(json.dumps(schema, separators=(",", ":")), 120) if schema else "any JSON"


def _is_text(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "string" and not (
        {"contentEncoding", "format", "enum", "const", "pattern"} & schema.keys())


def _prompt_cap(schema: Any) -> int | None:
    """The max_new_tokens cap of a fw.Prompt item schema (None: not a Prompt item)."""
    parts = schema.get("allOf") if isinstance(schema, dict) else None
    parts = parts if isinstance(parts, list) else [schema]
    if not any(isinstance(p, dict) and str(p.get("$ref", "")).endswith("/Prompt")
               for p in parts):
        return None
    from floodway.config import Generation

    for p in parts:
        cap = (p.get("properties") or {}).get("max_new_tokens", {}).get("maximum") \
            if isinstance(p, dict) else None
        if isinstance(cap, int) and cap >= 1:
            return cap
    return Generation().max_new_tokens


def item_schema(url: str, endpoint: str, headers: dict[str, str],
                timeout_s: float = OPENAPI_TIMEOUT_S) -> dict | None:
    """The item schema `endpoint` declares in the router's ``/openapi.json`` ({} when it
    declares none); None when the document cannot be read. Raises FloodwayError when the
    document has no such endpoint, naming those it has."""
    import httpx

    try:
        r = httpx.get(f"{url}/openapi.json", headers=headers, timeout=timeout_s)
        doc = r.json() if r.status_code == 200 else None
        paths = doc["paths"] if isinstance(doc, dict) else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(paths, dict):
        return None
    op = (paths.get(f"/v1/{endpoint}") or {}).get("post")
    if not isinstance(op, dict):
        names = sorted(p[len("/v1/"):] for p, ops in paths.items()
                       if isinstance(ops, dict) and "endpoints" in
                       ((ops.get("post") or {}).get("tags") or ()))
        raise FloodwayError(f"{url} has no endpoint {endpoint!r} (its endpoints: "
                            f"{', '.join(names) or 'none'}); pick one with --endpoint NAME")
    try:
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        items = schema["properties"]["inputs"].get("items", {})
    except (KeyError, TypeError, AttributeError):
        return {}
    return items if isinstance(items, dict) else {}


def _url_inputs(url: str, endpoint: str, headers: dict[str, str], max_words: int):
    """The Inputs a URL's endpoint takes (text unless its /openapi.json says otherwise)."""
    from floodway.bench.plan import Inputs

    items = item_schema(url, endpoint, headers)
    if not items or _is_text(items):
        return Inputs("text", max_words=max_words)
    cap = _prompt_cap(items)
    if cap is not None:
        return Inputs("prompt", max_words=max_words, max_new_tokens=cap)
    raise FloodwayError(f"endpoint {endpoint} at {url} takes {describe_schema(items)} items, "
                        f"not text (its /openapi.json): give one with --input-json")


def target_of(app: str, endpoint: str | None, input_json: str | None,
              deadline_ms: float | None, max_words: int,
              headers: dict[str, str] | None = None) -> Target:
    """The Target of bench's options (module docstring); `headers` go with a URL's
    /openapi.json request (the bearer key). Raises FloodwayError for a bad option or an
    endpoint that does not take what bench would send."""
    from floodway.bench.plan import Inputs
    from floodway.config import Route

    item = None
    if input_json is not None:
        try:
            item = json.loads(input_json)
        except json.JSONDecodeError as e:
            raise FloodwayError(f"--input-json is not JSON ({e.msg} at {e.pos}): give one "
                                "item, e.g. '\"a text\"' or '{\"prompt\": \"hi\"}'") from None
    if deadline_ms is not None and not 0 < deadline_ms <= 3_600_000:
        raise FloodwayError(f"--deadline-ms: give a number in (0, 3600000], got {deadline_ms}")
    if not app.startswith(("http://", "https://")):
        return _app_target(app, endpoint, item, deadline_ms, max_words)
    if endpoint is None:
        raise FloodwayError(f"{app} is a URL: name the endpoint with --endpoint NAME")
    url = app.rstrip("/")
    inputs = Inputs("json", item, max_words) if item is not None else \
        _url_inputs(url, endpoint, headers or {}, max_words)
    return Target(None, url, endpoint, inputs,
                  deadline_ms if deadline_ms is not None else Route().timeout_s * 1000)


__all__ = ["Target", "describe_schema", "item_name", "item_schema", "target_of"]
