"""The Modal router's ASGI app (what ``router()`` of the deployed example builds) in-process,
with the real modal client calling the fake control plane: a sync request, an async job
spawned and polled, and the stats the router reads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from modal_proto import api_pb2

# Imported here, on the main thread: a handler would import it lazily on the fake's thread
# otherwise, and CPython 3.11 breaks when two threads compile modules at once.
import floodway.runtime.worker  # noqa: F401
from floodway.modal.kv import MemoryKV
from floodway.modal.router.backend import ModalBackend
from tests.modal.support import API_KEY, APP_NAME, DIM, deploy_example, embed_rows, run_async
from tests.modal_fake import Timing

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def router_client(mod: Any) -> httpx.AsyncClient:
    """An HTTP client on the deployed example's router app, run in this process."""
    asgi = mod.router.local()
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://router")


async def until(pred: Callable[[], Awaitable[Any]], timeout_s: float = 10.0) -> Any:
    """Await `pred()` (one round trip to the fake each time) until it is truthy; its value.
    Raises TimeoutError after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if value := await pred():
            return value
        await asyncio.sleep(0)
    raise TimeoutError(f"condition not met in {timeout_s} s")


def test_sync_request_through_the_router(fake_modal, monkeypatch):
    monkeypatch.setenv("FLOODWAY_API_KEYS", API_KEY)
    mod = deploy_example(fake_modal)
    fake_modal.handle("Embed.predict", embed_rows)

    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with router_client(mod) as c:
            denied = await c.post("/v1/embed", json={"inputs": ["a"]})
            ok = await c.post("/v1/embed", json={"inputs": ["a", "bbb", "cc"]}, headers=AUTH)
            return denied, ok

    denied, ok = run_async(go())
    assert denied.status_code == 401
    assert ok.status_code == 200, ok.text
    outputs = ok.json()["outputs"]
    assert [len(v) for v in outputs] == [DIM] * 3
    assert [v[0] for v in outputs] == [1.0, 3.0, 2.0]          # in order
    # One Modal call per row, each to the class's `predict`, batched in a fake container.
    embed = fake_modal.state.function("Embed.*", app=APP_NAME)
    calls = [c for c in fake_modal.state.calls.values() if c.function_id == embed.function_id]
    assert len(calls) == 3
    assert {i.input.method_name for c in calls for i in c.inputs} == {"predict"}


def test_async_job_spawned_and_polled(fake_modal, monkeypatch):
    monkeypatch.setenv("FLOODWAY_API_KEYS", API_KEY)
    mod = deploy_example(fake_modal)
    fake_modal.handle("run_job", lambda endpoint, inputs: embed_rows(inputs))
    fake_modal.set_timing("run_job", Timing(service_s=0.05))
    # Past Modal's 8 KiB inline limit for spawned inputs: the arguments go through a blob.
    rows = [f"row {i} " + "x" * 200 for i in range(48)]

    async def go() -> tuple[httpx.Response, list[dict], httpx.Response]:
        async with router_client(mod) as c:
            made = await c.post("/v1/embed/jobs", json={"inputs": rows}, headers=AUTH)
            seen: list[dict] = []

            async def done() -> bool:
                r = await c.get(made.headers["location"], headers=AUTH)
                seen.append(r.json())
                return r.json()["status"] != "running"

            await until(done)
            other = await c.get("/v1/jobs/fc-unknown", headers=AUTH)
            return made, seen, other

    made, seen, other = run_async(go())
    assert made.status_code == 202, made.text
    job_id = made.json()["id"]
    assert made.headers["location"] == f"/v1/jobs/{job_id}"
    final = seen[-1]
    assert final["status"] == "succeeded", final
    assert [v[0] for v in final["outputs"]] == [float(len(r)) for r in rows]
    assert other.status_code == 404
    call = fake_modal.state.calls[job_id]
    assert call.invocation_type == api_pb2.FUNCTION_CALL_INVOCATION_TYPE_ASYNC   # a spawn
    assert call.inputs[0].input.args_blob_id                                     # via a blob
    # The job's record is in the floodway-jobs Dict (the router's only job state).
    assert fake_modal.state.dict_items("floodway-jobs")[("job", job_id)]["endpoint"] == "embed"


def test_router_stats_come_from_modal(fake_modal):
    """The router's snapshot is fed by ``get_current_stats`` of the class: runners (the warm
    container plus the one Modal starts for the queue) and Modal's backlog."""
    mod = deploy_example(fake_modal)
    slots = max(1, fake_modal.state.function("Embed.*", app=APP_NAME)
                .definition.max_concurrent_inputs)
    entered, gate = threading.Semaphore(0), asyncio.Event()

    async def blocked(rows: list) -> list:
        entered.release()
        await gate.wait()                 # on the server's loop: released by the test
        return embed_rows(rows)

    fake_modal.handle("Embed.predict", blocked)
    fake_modal.set_timing("Embed", Timing(cold_start_s=60.0))   # the new one stays starting
    backend = ModalBackend(mod.endpoints, {"embed": mod.Embed}, stats=MemoryKV())
    predict = mod.Embed().predict

    async def go() -> tuple[dict, Any, list]:
        calls = []
        for i in range(slots):            # one batch per slot of the warm container
            calls.append(asyncio.ensure_future(predict.remote.aio(f"slot{i}")))
            assert await asyncio.to_thread(entered.acquire, True, 10.0)
        calls += [asyncio.ensure_future(predict.remote.aio(x)) for x in ("b", "c", "d")]
        await until(lambda: _backlog_is(predict, 3))
        await backend.refresh("embed")
        ready, snap = backend.readiness()["modal"]["embed"], backend.snapshot("embed")
        fake_modal.loop.call_soon_threadsafe(gate.set)
        return ready, snap, await asyncio.gather(*calls)

    ready, snap, outs = run_async(go())
    assert (ready["runners"], ready["backlog"], ready["error"]) == (2, 3, None)
    assert len(snap.containers) == 2 and snap.queued_rows == 3
    assert [o[0] for o in outs] == [5.0] * slots + [1.0] * 3


def test_a_row_refused_on_its_input_is_a_422_naming_its_field(fake_modal, monkeypatch):
    """The GPU class's own ``predict`` body answers the fake's batches: a row the endpoint
    refuses (a `fw.RequestError`) comes back as "InputError: ...", which the router answers
    as the local router does, a 422 "input_error" naming ``inputs[i].<field>`` with the
    other rows' outputs; a row that raised anything else is still a 500."""
    from types import SimpleNamespace

    import floodway as fw
    from floodway.modal.worker.gpu_class import _Hooks

    monkeypatch.setenv("FLOODWAY_API_KEYS", API_KEY)
    mod = deploy_example(fake_modal)

    def embed(model: Any, texts: list[str]) -> list[list[float]]:
        for t in texts:
            if len(t) > 5:
                raise fw.RequestError(f"text: {len(t)} characters is more than 5", status=422)
            if t == "boom":
                raise ValueError("boom")
        return embed_rows(texts)

    hooks = _Hooks()
    hooks.ep, hooks.model = SimpleNamespace(fn=embed), None    # type: ignore[assignment]
    fake_modal.handle("Embed.predict", hooks._predict)

    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with router_client(mod) as c:
            refused = await c.post("/v1/embed", json={"inputs": ["a", "toolong", "cc"]},
                                   headers=AUTH)
            raised = await c.post("/v1/embed", json={"inputs": ["a", "boom"]}, headers=AUTH)
            return refused, raised

    refused, raised = run_async(go())
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert (body["error"]["type"], body["error"]["field"]) == ("input_error", "inputs[1].text")
    assert [o and o[0] for o in body["outputs"]] == [1.0, None, 2.0]
    [item] = body["item_errors"]
    assert item["index"] == 1 and "7 characters is more than 5" in item["message"]
    assert raised.status_code == 500, raised.text
    assert raised.json()["error"]["type"] == "endpoint_error"
    assert "ValueError: boom" in raised.json()["item_errors"][0]["message"]


async def _backlog_is(predict: Any, n: int) -> bool:
    return (await predict.get_current_stats.aio()).backlog == n
