"""The router fuzzed from its own OpenAPI document, in process: schemathesis loads
``/openapi.json`` from a real floodway ASGI app (endpoints of every item type, a streaming
one, the OpenAI-compatible routes) over a backend that runs the endpoint functions as the
container does, and sends each operation generated requests, valid and invalid, seeded
(derandomized). Every answer must be no internal error (the functions never fail on an
input they accept, so a 500 is the router's), a status, content type, body, headers and
stream events the document names; and the router must still serve afterwards. Two ways a
router is made: with a job queue and no keys, and with keys, `private_detail` and no job
queue. A last test shows the fuzz does find an answer the document does not name."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, Literal

import jsonschema_rs
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from pydantic import BaseModel
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.http.streaming import NDJSON, SSE
from floodway.jobs.local import LocalJobs
from floodway.routers.admission import ApiKeys
from floodway.routers.batch_item import item_failed
from floodway.runtime.protocol import ItemResult
from floodway.runtime.worker import item_events
from tests.app.scripted import ScriptedBackend, client
from tests.app.streamed import Streamed

app = fw.App("fuzz")
KEY = "k-fuzz"


class Pair(BaseModel):
    left: str
    right: int


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(max_inputs=8))
def embed(model, texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), 0.5] for t in texts]


@app.endpoint(route=fw.Route(max_inputs=8))
def rerank(model, pairs: list[tuple[str, str]]) -> list[float]:
    return [float(len(a) - len(b)) for a, b in pairs]


@app.endpoint(route=fw.Route(max_inputs=4))
def picture(model, images: list[fw.Image]) -> list[dict[str, int]]:
    return [{"width": im.width, "height": im.height} for im in images]


@app.endpoint(route=fw.Route(max_inputs=4))
def grid(model, arrays: list[fw.Array[np.int16, (2, None)]]) -> list[int]:
    return [int(a.sum()) for a in arrays]


@app.endpoint(route=fw.Route(max_inputs=8))
def shaped(model, items: list[Pair | Literal["none"]]) -> list[str]:
    return [i if isinstance(i, str) else f"{i.left}:{i.right}" for i in items]


@app.endpoint(route=fw.Route(max_inputs=8))
def anything(model, items):
    return [type(i).__name__ for i in items]


@app.endpoint(generation=fw.Generation(max_new_tokens=8), route=fw.Route(max_inputs=4))
async def talk(model, prompt: fw.Prompt):
    text = prompt.prompt if prompt.prompt is not None else prompt.messages[-1].content
    words = text.split()[:prompt.max_new_tokens or 8]
    for w in words:
        yield {"text": w + " ", "tokens": 1}
    yield {"text": "", "tokens": 0, "finish_reason": "stop",
           "usage": {"prompt_tokens": len(words), "completion_tokens": len(words)}}


class ContainerBackend(ScriptedBackend):
    """The scripted backend, running each batch as the container does (`item_events`:
    inputs decoded from their wire form, one that does not decode failing alone)."""

    async def _results(self, endpoint: str, inputs: list) -> list[Any]:
        out: list[Any] = [None] * len(inputs)
        items = [(f"r1:{i}", x) for i, x in enumerate(inputs)]
        for events in item_events(self.app[endpoint].fn, None, 1, items):
            for ev in events:
                i = int(str(ev.item_id).rsplit(":", 1)[1])
                out[i] = ev.output if isinstance(ev, ItemResult) else \
                    item_failed(endpoint, ev.item_id, ev.message)
        return out

    def enqueue(self, endpoint: str, inputs: list, *, timeout_s: float, priority: int = 1,
                tenant: str = "anonymous") -> Any:
        ep = self.app[endpoint]
        if not ep.streaming:
            return super().enqueue(endpoint, inputs, timeout_s=timeout_s, priority=priority,
                                   tenant=tenant)
        self.calls.append((endpoint, inputs, timeout_s))
        return Streamed(endpoint, ep.fn, inputs, self.clock)


@schemathesis.check
def no_internal_error(ctx: Any, response: Any, case: Any) -> bool:
    """No 500: the endpoint functions here never fail on an input the router passes them,
    so a 500 is the router's own (501, 503, 504 are answers the document names)."""
    if response.status_code == 500:
        raise AssertionError(f"500: {response.text[:500]}")
    return True


@schemathesis.check
def stream_events_conform(ctx: Any, response: Any, case: Any) -> bool:
    """Each event of a streamed answer (SSE ``data:``, an NDJSON line) is JSON of the
    schema the document gives for it (``contentSchema``; NDJSON lines: the native stream
    event), and a complete native stream ends with its end marker."""
    ctype = response.headers.get("content-type", [""])
    ctype = (ctype[0] if isinstance(ctype, list) else ctype).split(";")[0]
    if response.status_code != 200 or ctype not in (SSE, NDJSON):
        return True
    doc = case.operation.schema.raw_schema
    text = response.content.decode()
    if ctype == SSE:
        media = doc["paths"][case.operation.path][case.method.lower()]["responses"]["200"]
        data = media["content"][SSE]["schema"]["properties"]["data"]
        schema = next(s["contentSchema"] for s in data["anyOf"] if "contentSchema" in s)
        events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
        end = "[DONE]"
    else:
        schema = {"$ref": "#/components/schemas/floodway.StreamEvent"}
        events, end = text.splitlines(), '{"done":true}'
    check = jsonschema_rs.validator_for({**schema, "components": doc["components"]})
    for data in events:
        if data != "[DONE]":
            check.validate(json.loads(data))
    native = not case.operation.path.startswith(("/v1/completions", "/v1/chat"))
    if native and events[-1] != end:
        raise AssertionError(f"a native stream ends with {end}, not {events[-1][:200]}")
    return True


CHECKS = [no_internal_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance, stream_events_conform]
ACCEPTS = (None, SSE, NDJSON, "application/json", "text/*;q=0.5, application/json;q=0.4",
           "image/png")


def fuzz(operation: Any, mode: GenerationMode, examples: int, counts: Counter,
         failures: list[str], key: str | None = None) -> None:
    """`examples` cases of `operation` in `mode`, each sent and checked; a failing case
    is recorded (not raised), so that every operation is fuzzed. With `key`, every
    other case carries it (the rest, schemathesis's own bearer tokens). Streaming
    endpoints' cases go round ACCEPTS."""

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        n = counts["cases"] = counts["cases"] + 1
        headers = {"Authorization": f"Bearer {key}"} if key and n % 2 else {}
        if operation.path == "/v1/talk" and (accept := ACCEPTS[n % len(ACCEPTS)]):
            headers["Accept"] = accept
        try:
            response = case.call_and_validate(headers=headers, checks=CHECKS)
        except (FailureGroup, Exception) as e:  # noqa: BLE001 - told with its request
            failures.append(f"{operation.label} ({mode}): {str(e)[:2000]}")
            return
        counts[f"{operation.label} {response.status_code}"] += 1

    try:
        run()
    except Unsatisfiable:   # nothing to make invalid: no parameters, no body
        assert mode == GenerationMode.NEGATIVE, operation.label


def fuzz_all(asgi: Any, examples: int, key: str | None = None) -> tuple[int, Counter, list]:
    """Every operation of `asgi`'s document fuzzed -> (operations, counts, failures)."""
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", asgi, headers={"Authorization": f"Bearer {key}"} if key else {})
    schema.validate()   # OpenAPI 3.1's own schema
    # schemathesis leaves out the path that served the document: fuzzed all the same.
    operations = [r.ok() for r in schema.get_all_operations()] + \
        [schema["/openapi.json"]["GET"]]
    counts: Counter = Counter()
    failures: list[str] = []
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(op, mode, examples, counts, failures, key)
    print(f"\n{len(operations)} operations, {counts['cases']} cases, {len(failures)} "
          f"failures; answers: {sorted((k, v) for k, v in counts.items() if k != 'cases')}")
    return len(operations), counts, failures


def still_serves(asgi: Any, headers: dict[str, str]) -> None:
    """A plain request of each kind is answered after the fuzz as before it."""
    async def go():
        async with client(asgi) as c:
            ok = await c.post("/v1/embed", json={"inputs": ["abc"]}, headers=headers)
            stream = await c.post("/v1/talk", json={"inputs": [{"prompt": "a b"}]},
                                  headers={**headers, "Accept": NDJSON})
            health = await c.get("/healthz")
            return ok, stream, health

    ok, stream, health = asyncio.run(go())
    assert (ok.status_code, ok.json()) == (200, {"outputs": [[3.0, 0.5]]})
    lines = [json.loads(line) for line in stream.text.splitlines()]
    assert stream.status_code == 200 and lines[-1] == {"done": True}
    assert {"index": 0, "chunk": {"text": "a ", "tokens": 1}} in lines
    assert health.status_code == 200


@pytest.fixture
def queued(tmp_path):
    clock = ManualClock()
    backend = ContainerBackend(app, clock)
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", clock=clock)
    yield make_asgi_app(app, backend, jobs=jobs, clock=clock)
    jobs.store.close()


def test_with_a_job_queue_and_no_keys_every_answer_is_as_the_document_says(queued):
    operations, counts, failures = fuzz_all(queued, examples=25)
    assert not failures, "\n\n".join(failures[:5])
    assert operations == 25 and counts["cases"] > 800
    # The fuzz reached the answers that matter, not only refusals.
    for answer in ("POST /v1/embed 200", "POST /v1/rerank/jobs 202", "POST /v1/talk 200",
                   "POST /v1/talk 406", "POST /v1/chat/completions 200", "POST /v1/grid 422",
                   "GET /v1/jobs/{job_id} 404"):
        assert counts[answer] > 0, answer
    still_serves(queued, {})


def test_with_keys_private_detail_and_no_job_queue_as_the_document_says():
    clock = ManualClock()
    asgi = make_asgi_app(app, ContainerBackend(app, clock), api_keys=ApiKeys([KEY]),
                         clock=clock, private_detail=True)
    _, counts, failures = fuzz_all(asgi, examples=8, key=KEY)
    assert not failures, "\n\n".join(failures[:5])
    for answer in ("POST /v1/embed 200", "POST /v1/embed 401", "POST /v1/embed/jobs 501",
                   "GET /metrics 401"):
        assert counts[answer] > 0, answer
    still_serves(asgi, {"Authorization": f"Bearer {KEY}"})


def test_the_fuzz_finds_an_answer_the_document_does_not_name():
    clock = ManualClock()
    asgi = make_asgi_app(app, ContainerBackend(app, clock), clock=clock)
    page = next(r for r in asgi.routes if r.path == "/openapi.json").endpoint.__self__
    del page.document["paths"]["/v1/grid"]["post"]["responses"]["422"]
    page.body = json.dumps(page.document).encode()
    schema = schemathesis.openapi.from_asgi("/openapi.json", asgi)
    counts: Counter = Counter()
    failures: list[str] = []
    fuzz(schema["/v1/grid"]["POST"], GenerationMode.POSITIVE, 10, counts, failures)
    assert failures and all("Undocumented status code" in f for f in failures)
