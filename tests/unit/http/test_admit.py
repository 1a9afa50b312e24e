"""Admission over HTTP on its own: the order of the checks, the body read last (and only
then), its arrival timed on the injected clock."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.errors import RequestError, Unauthorized
from floodway.http.admit import BODY_TIMEOUT_S, Admission
from floodway.http.errors import Overloaded
from floodway.http.metrics import Metrics
from floodway.routers.admission import ApiKeys, Priority, key_id
from tests.app.scripted import settle

app = fw.App("a")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=2.0, tenant_rate_per_s=1, tenant_burst=1))
def upper(model, texts: list[str]) -> list[str]:
    return texts


def request(body: bytes | None, **headers: str) -> tuple[Request, list[int]]:
    """A request whose body is `body` (None: it never arrives), and how often its body was
    asked for."""
    asked: list[int] = []

    async def receive():
        asked.append(1)
        if body is None:
            await asyncio.Event().wait()
        return {"type": "http.request", "body": body, "more_body": False}

    raw = [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/v1/upper", "headers": raw},
                   receive), asked


def admission(clock, keys=(), arrivals=None):
    return Admission(app, ApiKeys(list(keys)), metrics=Metrics(lambda: {}), clock=clock,
                     on_arrival=None if arrivals is None else
                     lambda e, t: arrivals.append((e, t)))


def test_an_admitted_request_and_its_arrival():
    clock, arrivals = ManualClock(), []
    r, _ = request(b'{"inputs": ["a"]}', x_priority="high", x_deadline_ms="250",
                   authorization="Bearer k1")
    a = asyncio.run(admission(clock, ["k1"], arrivals).admit(r, "upper"))
    assert (a.tenant, a.priority, a.budget_s, a.inputs) == (key_id("k1"), Priority.HIGH, 0.25,
                                                            ["a"])
    assert arrivals == [("upper", clock.wall())]


@pytest.mark.parametrize(("name", "headers", "raised"), [
    ("nope", {}, RequestError),
    ("upper", {"authorization": "Bearer wrong"}, Unauthorized),
    ("upper", {"x_priority": "urgent"}, RequestError),
    ("upper", {"x_deadline_ms": "1.5"}, RequestError),
])
def test_refusals_come_before_the_body_is_read(name, headers, raised):
    r, asked = request(b'{"inputs": ["a"]}', **headers)
    with pytest.raises(raised):
        asyncio.run(admission(ManualClock(), ["k1"] if "authorization" in headers else ())
                    .admit(r, name))
    assert asked == []


def test_over_its_rate_a_tenant_is_refused_before_its_body():
    arrivals: list = []
    adm = admission(ManualClock(), arrivals=arrivals)

    async def go():
        first, _ = request(b'{"inputs": ["a"]}')
        await adm.admit(first, "upper")
        second, asked = request(b'{"inputs": ["a"]}')
        with pytest.raises(Overloaded) as e:
            await adm.admit(second, "upper")
        return e.value, asked

    refused, asked = asyncio.run(go())
    assert (refused.status, refused.kind, refused.retry_after_s) == (429, "rate_limited", 1.0)
    assert asked == [] and len(arrivals) == 1


def test_a_body_that_never_arrives_is_a_408_on_the_clock():
    clock = ManualClock()

    async def go():
        r, asked = request(None)
        admitting = asyncio.ensure_future(admission(clock).admit(r, "upper"))
        await settle()
        clock.advance(BODY_TIMEOUT_S - 0.1)
        await settle()
        early = admitting.done()
        clock.advance(0.2)
        with pytest.raises(RequestError) as e:
            await admitting
        return early, e.value, asked

    early, error, asked = asyncio.run(go())
    assert not early and asked
    assert error.status == 408 and "did not arrive within 30 s" in str(error)


def test_a_client_that_leaves_mid_upload_is_a_499_not_a_server_error():
    from floodway.http.errors import ClientClosed

    messages = [{"type": "http.request", "body": b'{"inputs": ["a', "more_body": True},
                {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0)

    r = Request({"type": "http", "method": "POST", "path": "/v1/upper", "headers": []},
                receive)
    with pytest.raises(ClientClosed):
        asyncio.run(admission(ManualClock()).admit(r, "upper"))


def test_a_large_body_is_parsed_off_the_event_loop_with_the_same_answer():
    from floodway.http.admit import PARSE_IN_THREAD_BYTES

    texts = ["x" * 1000] * 100
    body = ('{"inputs": [' + ",".join(f'"{t}"' for t in texts) + "]}").encode()
    assert len(body) > PARSE_IN_THREAD_BYTES
    a = asyncio.run(admission(ManualClock()).admit(request(body)[0], "upper"))
    assert a.inputs == texts
    bad = body.replace(b'"' + b"x" * 1000 + b'"]', b"3]")
    with pytest.raises(RequestError) as e:
        asyncio.run(admission(ManualClock()).admit(request(bad)[0], "upper"))
    assert e.value.status == 422 and e.value.field == "inputs[99]"


def test_a_streaming_endpoints_sequence_limit_is_its_pool_or_its_prioritys_queue_share():
    from floodway.config import MAX_CONTAINERS_LIMIT
    from floodway.http.admit import check_sequences, most_sequences

    gen_app = fw.App("g")

    @gen_app.endpoint(generation=fw.Generation(max_sequences=4),
                      route=fw.Route(max_queue=10))
    async def unbounded(model, text: str):
        yield text

    @gen_app.endpoint(generation=fw.Generation(max_sequences=4), route=fw.Route(max_queue=10),
                      warm=fw.WarmPool(max_containers=3))
    async def bounded(model, text: str):
        yield text

    @gen_app.endpoint(generation=fw.Generation(max_sequences=4), route=fw.Route(max_queue=40),
                      warm=fw.WarmPool(max_containers=3))
    async def queued(model, text: str):
        yield text

    # no max_containers: the largest pool allowed (fw.WarmPool's cap)
    assert most_sequences(gen_app["unbounded"]) == MAX_CONTAINERS_LIMIT * 4
    # A request runs whole on the containers' slots or waits whole in the queue: the two
    # never add up (3 x 4 + 10 = 22 sequences never fit).
    assert most_sequences(gen_app["bounded"]) == 3 * 4
    # The queue's share by priority (QUEUE_SHARE: 1, 0.9, 0.5 of max_queue 40).
    assert [most_sequences(gen_app["queued"], p) for p in (2, 1, 0)] == [40, 36, 20]
    assert most_sequences(app["upper"]) is None            # not streaming: no such limit
    check_sequences(gen_app["bounded"], 12, "n")
    with pytest.raises(RequestError) as e:
        check_sequences(gen_app["bounded"], 13, "n")
    assert (e.value.status, e.value.field) == (413, "n")
    assert str(e.value).startswith("n: the request makes 13 sequences")
    with pytest.raises(RequestError) as e:
        check_sequences(gen_app["queued"], 21, "inputs", 0)
    assert "at most 20 at low priority" in str(e.value)
