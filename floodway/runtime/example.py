"""The request `floodway serve --show-example` sends: items of the endpoint's own type.

    example_inputs(fn) -> list of wire-form items | None
    curl_line(base, endpoint, body, stream=) -> the command a user can copy
    describe(output) -> str
    await show_example(base, endpoint) -> the answer's status | None (printed as it goes)

The items are built from the function's ``inputs: list[T]`` annotation (``item: T`` for a
streaming endpoint; `floodway.functions.items`), so a pair endpoint gets pairs, an image
endpoint a small PNG, an array endpoint zeros of its shape and an `fw.Prompt` endpoint a
short prompt (`PROMPT_EXAMPLE`); None where there is no obvious item (the example is then
skipped with a message rather than sent and refused). A streaming endpoint's example is
asked for as a stream (``Accept: text/event-stream``) and its events are summed up.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from typing import Any

import httpx

from floodway.functions.endpoint import Endpoint
from floodway.functions.items import (
    ArraySpec,
    ImageSpec,
    declared_item_type,
    sample_item,
    spec_of,
)
from floodway.functions.prompts import Prompt

EXAMPLE_TEXTS = ["floodway keeps latency flat through traffic spikes.", "Hello, world!"]
EXAMPLE_PAIRS = [["how do I keep latency flat?", "floodway keeps latency flat through "
                  "traffic spikes."], ["how do I keep latency flat?", "Hello, world!"]]
# Small, so that the example answers at once even on a CPU.
PROMPT_EXAMPLE = {"prompt": "Hello", "max_new_tokens": 16}
SSE = "text/event-stream"


def example_inputs(fn: Callable[..., Any]) -> list[Any] | None:
    """Two items (one for images, arrays and prompts) of `fn`'s declared item type, in
    their wire form; None when the type has no obvious example."""
    t = declared_item_type(fn)
    if t is str or t is Any:
        return list(EXAMPLE_TEXTS)
    if t == tuple[str, str]:
        return [list(p) for p in EXAMPLE_PAIRS]
    if t is Prompt:
        return [dict(PROMPT_EXAMPLE)]
    spec = spec_of(t)
    if isinstance(spec, ImageSpec):
        buf = io.BytesIO()
        sample_item(fn).save(buf, format="PNG")
        return [base64.b64encode(buf.getvalue()).decode("ascii")]
    if isinstance(spec, ArraySpec):
        return [sample_item(fn).tolist()]
    return None


def curl_line(base: str, endpoint: str, body: Any, *, stream: bool = False) -> str:
    """The ``curl`` command that sends `body` to ``POST {base}/v1/{endpoint}``; with
    `stream`, asking for Server-Sent Events (``-N``: each event printed as it comes)."""
    flags, accept = ("-sN", f" -H 'Accept: {SSE}'") if stream else ("-s", "")
    return (f"curl {flags} -X POST {base}/v1/{endpoint} -H 'Content-Type: application/json'"
            f"{accept} -d '{json.dumps(body)}'")


def describe(output: Any) -> str:
    """A few words on one output: ``384 numbers``, ``a number``, ``an object with keys
    label, score``, ``a list of 5 objects``."""
    if isinstance(output, bool) or output is None:
        return repr(output)
    if isinstance(output, int | float):
        return "a number"
    if isinstance(output, str):
        return "a string"
    if isinstance(output, dict):
        return f"an object with keys {', '.join(map(str, output))}"
    if isinstance(output, list):
        if output and all(isinstance(x, int | float) and not isinstance(x, bool)
                          for x in output):
            return f"{len(output)} numbers"
        if output and all(isinstance(x, dict) for x in output):
            return f"a list of {len(output)} objects"
        return f"a list of {len(output)} items"
    return type(output).__name__


def _shown(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def describe_stream(events: list[dict[str, Any]]) -> list[str]:
    """Lines on a stream's events (``{"index", "chunk" | "output" | "error"}``): per input,
    its chunks, then its output (and its text, when it has one) or its error."""
    lines = []
    for i in sorted({e["index"] for e in events if isinstance(e.get("index"), int)}):
        mine = [e for e in events if e.get("index") == i]
        count = sum("chunk" in e for e in mine)
        n = f"{count} chunk{'' if count == 1 else 's'}"
        end = next((e for e in mine if "output" in e or "error" in e), None)
        if end is None:
            lines.append(f"input {i}: {n}, and no end")
        elif "error" in end:
            error = _shown(json.dumps(end["error"]))
            lines.append(f"input {i}: {n}, then an error: {error}")
        else:
            out = end["output"]
            text = out.get("text") if isinstance(out, dict) else out
            said = f" (text {_shown(repr(text), 80)})" if isinstance(text, str) else ""
            lines.append(f"input {i}: {n}, then its output: {describe(out)}{said}")
    return lines


async def _streamed(client: httpx.AsyncClient, url: str, body: Any,
                    out: Callable[[str], None]) -> int:
    async with client.stream("POST", url, json=body, headers={"Accept": SSE}) as r:
        if r.status_code != 200 or not r.headers.get("content-type", "").startswith(SSE):
            text = (await r.aread()).decode("utf-8", "replace")
            out(f"answer ({r.status_code}, {len(text)} bytes): {_shown(text)}")
            return r.status_code
        events, first = [], None
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            first = first or line
            events.append(json.loads(line[len("data: "):]))
    out(f"answer ({r.status_code}, {SSE}): {len(events)} events then data: [DONE]; the "
        f"first: {_shown(first or '(none)')}")
    for line in describe_stream(events):
        out(f"  {line}")
    return r.status_code


async def _buffered(client: httpx.AsyncClient, url: str, body: Any,
                    out: Callable[[str], None]) -> int:
    r = await client.post(url, json=body)
    out(f"answer ({r.status_code}, {len(r.text)} bytes): {_shown(r.text)}...")
    if r.status_code == 200:
        outs = r.json()["outputs"]
        out(f"  {len(outs)} outputs, each {describe(outs[0])}.")
    return r.status_code


def _print(line: str) -> None:
    print(line, flush=True)


async def show_example(base: str, endpoint: Endpoint, *,
                       client: httpx.AsyncClient | None = None,
                       out: Callable[[str], None] = _print) -> int | None:
    """Print a curl line with example items of `endpoint`'s own type, send that request to
    the router at `base` (``http://host:port``) and print what came back: for a streaming
    endpoint, asked for as Server-Sent Events, each input's chunks and combined output; else
    the start of the JSON answer and its outputs. Returns the answer's HTTP status, None
    when the item type has no example (a line then says what to POST). `client` (None: a
    new one, 30 s timeout) sends it; `out` prints one line. Raises httpx.HTTPError when the
    router cannot be reached."""
    name, inputs = endpoint.name, example_inputs(endpoint.fn)
    if inputs is None:
        out(f"\nready. (no example request for {name}'s item type; POST "
            f"{{\"inputs\": [...]}} to {base}/v1/{name})")
        return None
    body, stream = {"inputs": inputs}, endpoint.streaming
    out(f"\nready. try{' (a stream of Server-Sent Events)' if stream else ''}:\n  "
        f"{curl_line(base, name, body, stream=stream)}")
    own = client is None
    client = client or httpx.AsyncClient(timeout=30)
    try:
        send = _streamed if stream else _buffered
        status = await send(client, f"{base}/v1/{name}", body, out)
    finally:
        if own:
            await client.aclose()
    if stream:
        out("  (without the Accept header: one JSON answer, {\"outputs\": [...]}, at the end; "
            "Accept: application/x-ndjson: JSON lines)")
    if endpoint.input_type is Prompt and stream:
        out(f"  OpenAI clients: base_url {base}/v1, model {name!r} "
            "(POST /v1/chat/completions, /v1/completions)")
    out("Ctrl-C stops the server.\n")
    return status


__all__ = ["EXAMPLE_PAIRS", "EXAMPLE_TEXTS", "PROMPT_EXAMPLE", "curl_line", "describe",
           "describe_stream", "example_inputs", "show_example"]
