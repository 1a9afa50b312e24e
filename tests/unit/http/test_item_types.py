"""Item types over HTTP, in process: images, text pairs and arrays validated by the router
(413/422 naming the item, before any work), decoded in the worker, and their outputs
answered the same on the sync route, by async jobs and through the Modal class."""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import threading
import zlib
from typing import Annotated

import numpy as np
import PIL.Image
import pytest
from modal._partial_function import _find_partial_methods_for_user_cls, _PartialFunctionFlags

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.errors import EndpointError
from floodway.http.app import make_asgi_app
from floodway.http.responses import JSONResponse, outputs
from floodway.jobs.local import LocalJobs
from floodway.modal.router.calls import row_result
from floodway.modal.worker.gpu_class import worker_class
from floodway.routers.schema import parse_predict
from floodway.runtime import worker
from floodway.runtime.protocol import (
    FROM_WORKER,
    Batch,
    ItemError,
    ItemResult,
    decode_all,
    encode,
    encode_all,
)
from tests.app.scripted import ScriptedBackend, client

app = fw.App("items-http")
MODEL = fw.HFModel("org/m", revision="b" * 40)
IMAGES = fw.HFModel("org/m", revision="b" * 40, task="image-classification")


@app.endpoint(model=IMAGES)
def classify(model, images: list[fw.Image]) -> list[dict]:
    return [{"label": "wide" if i.width > i.height else "tall",
             "score": np.float32(i.width / (i.width + i.height)),
             "mean": np.asarray(i).mean(axis=(0, 1))} for i in images]


SMALL = Annotated[fw.Image, fw.ImageSpec(max_pixels=100, max_request_pixels=250,
                                         max_batch_pixels=250)]


@app.endpoint(model=IMAGES)
def thumbs(model, images: list[SMALL]) -> list[int]:
    return [i.width * i.height for i in images]


@app.endpoint(model=MODEL)
def rerank(model, pairs: list[tuple[str, str]]) -> list[float]:
    return np.array([len(set(q) & set(p)) / 4 for q, p in pairs], dtype=np.float32)


@app.endpoint(model=None)   # arrays: no text task's items
def column_sums(model, rows: list[fw.Array[np.float32, (None, 3)]]) -> list:
    return [r.sum(axis=0) for r in rows]


class WorkerBackend(ScriptedBackend):
    """Runs each request as one batch through the worker's real loop (`worker.serve`), its
    messages encoded and decoded as a container's are (the local runtime's path)."""

    async def _results(self, endpoint, inputs):
        sent: list = []
        batch = Batch(1, tuple((f"r:{i}", x) for i, x in enumerate(inputs)))
        worker.serve(self.app[endpoint].fn, None, [encode(batch)],
                     lambda msgs: sent.extend(decode_all(encode_all(msgs), FROM_WORKER)))
        by_id = {m.item_id: m for m in sent if isinstance(m, ItemResult | ItemError)}
        return [by_id[f"r:{i}"].output if isinstance(by_id[f"r:{i}"], ItemResult)
                else EndpointError(f"endpoint {endpoint!r} raised {by_id[f'r:{i}'].message}")
                for i in range(len(inputs))]


def png(size=(4, 2), color=(255, 0, 0), fmt="PNG") -> str:
    buf = io.BytesIO()
    PIL.Image.new("RGB", size, color).save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode()


def truncated() -> str:
    return base64.b64encode(base64.b64decode(png((32, 24)))[:-40]).decode()


def bomb() -> str:
    """A PNG declaring 50000 x 50000 pixels in a few hundred bytes."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind +
                                                                                        data))
    raw = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 50_000, 50_000, 1, 0,
                                                             0, 0, 0))
           + chunk(b"IDAT", zlib.compress(bytes(6251 * 4))) + chunk(b"IEND", b""))
    return base64.b64encode(raw).decode()


REQUESTS = {   # endpoint -> (inputs, the outputs every path answers)
    "classify": ([png(), "data:image/jpeg;base64," + png((2, 6), fmt="JPEG")],
                 [{"label": "wide", "score": 4 / 6, "mean": [255.0, 0.0, 0.0]},
                  {"label": "tall", "score": 0.25}]),
    "rerank": ([["abcd", "abxy"], ["q", "zz"]], [0.5, 0.0]),
    "column_sums": ([[[1, 2, 3], [4, 5, 6]], [[0.5, 0, 0]]], [[5.0, 7.0, 9.0], [0.5, 0.0, 0.0]]),
}


def same(got, want) -> bool:
    """`got` matches `want` (floats to float32 precision; keys of `want` only)."""
    if isinstance(want, dict):
        return all(same(got[k], v) for k, v in want.items())
    if isinstance(want, list):
        return len(got) == len(want) and all(map(same, got, want))
    return got == pytest.approx(want, rel=1e-6) if isinstance(want, float) else got == want


def test_each_item_type_is_answered_on_the_sync_route_and_by_jobs(tmp_path):
    clock = ManualClock()
    backend = WorkerBackend(app, clock)
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", clock=clock)
    asgi = make_asgi_app(app, backend, jobs=jobs, clock=clock)

    async def go():
        await jobs.start()
        try:
            async with client(asgi) as c:
                out = {}
                for name, (inputs, _) in REQUESTS.items():
                    sync = await c.post(f"/v1/{name}", json={"inputs": inputs})
                    queued = await c.post(f"/v1/{name}/jobs", json={"inputs": inputs})
                    job = {"status": "queued"}
                    async with asyncio.timeout(20):   # a guard against a hang, not a wait
                        while job["status"] in ("queued", "running"):
                            await asyncio.sleep(0)
                            job = (await c.get(queued.headers["location"])).json()
                    out[name] = (sync, job)
                return out
        finally:
            await jobs.stop()

    for name, (sync, job) in asyncio.run(go()).items():
        want = REQUESTS[name][1]
        assert sync.status_code == 200, sync.text
        assert same(sync.json()["outputs"], want), (name, sync.json())
        assert job["status"] == "succeeded" and job["outputs"] == sync.json()["outputs"], name


def test_the_modal_class_answers_the_same_outputs():
    """The router sends each validated row to the GPU class's ``predict`` (here its real
    body, as Modal's container calls it); its outputs become the same answer."""
    async def modal_answer(name, inputs):
        ep = app[name]
        cls = worker_class(ep, "/artifacts")
        predict = _find_partial_methods_for_user_cls(cls, _PartialFunctionFlags.BATCHED)
        rows = parse_predict(JSONResponse({"inputs": inputs}).body, ep.input_type)
        answered = predict["predict"].raw_f(cls(), rows)
        calls = []
        for value in answered:
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(value)
            calls.append(fut)
        return JSONResponse({"outputs": outputs(name, rows, [row_result(name, f)
                                                            for f in calls])}).body

    async def sync_answer(name, inputs):
        async with client(make_asgi_app(app, WorkerBackend(app, ManualClock()),
                                        clock=ManualClock())) as c:
            return (await c.post(f"/v1/{name}", json={"inputs": inputs})).content

    for name, (inputs, _) in REQUESTS.items():
        assert asyncio.run(modal_answer(name, inputs)) == asyncio.run(sync_answer(name, inputs))


@pytest.mark.parametrize("name,item,status,kind,needle", [
    ("classify", bomb(), 413, "too_large", "declares 2,500,000,000 pixels"),
    ("classify", "%%%", 422, "invalid_request", "not valid base64"),
    ("rerank", ["only one"], 422, "invalid_request", "a JSON array of 2 items [str, str]"),
    ("column_sums", [[1, 2]], 422, "invalid_request", "float32 array of shape (*, 3), got "
                                                      "shape (1, 2)"),
    ("column_sums", [[1, 2, 3], [4]], 422, "invalid_request", "ragged"),
])
def test_a_bad_item_is_refused_by_the_router_naming_it(name, item, status, kind, needle):
    clock = ManualClock()
    backend = WorkerBackend(app, clock)
    good = REQUESTS[name][0][0]

    async def go():
        async with client(make_asgi_app(app, backend, clock=clock)) as c:
            return await c.post(f"/v1/{name}", json={"inputs": [good, good, item]})

    r = asyncio.run(go())
    err = r.json()["error"]
    assert (r.status_code, err["type"], err["field"]) == (status, kind, "inputs[2]")
    assert err["message"].startswith("inputs[2]: ") and needle in err["message"]
    assert backend.calls == []   # refused before any work was queued


def test_images_are_verified_off_the_event_loop_even_in_a_small_body(monkeypatch):
    """A small PNG may declare up to the pixel limit: decoding it must not stall the loop."""
    import threading

    import floodway.http.admit as admit

    threads = {}

    def recording(body, item_type, **kw):
        threads[len(threads)] = threading.current_thread() is threading.main_thread()
        return parse_predict(body, item_type, **kw)

    monkeypatch.setattr(admit, "parse_predict", recording)
    clock = ManualClock()

    async def go():
        async with client(make_asgi_app(app, WorkerBackend(app, clock), clock=clock)) as c:
            return [(await c.post(f"/v1/{name}", json={"inputs": REQUESTS[name][0]})).status_code
                    for name in ("classify", "rerank")]

    assert asyncio.run(go()) == [200, 200]
    assert threads == {0: False, 1: True}   # the image body on a thread, the small text inline


def _post(name: str, inputs: list, backend=None):
    clock = ManualClock()
    backend = backend or WorkerBackend(app, clock)

    async def go():
        async with client(make_asgi_app(app, backend, clock=clock)) as c:
            return await c.post(f"/v1/{name}", json={"inputs": inputs})

    return asyncio.run(go())


def test_the_router_verifies_images_from_their_headers_only(monkeypatch):
    """No pixel is decoded on the router: a truncated file passes it (its header is whole),
    a file that is no image or declares too many pixels does not."""
    import PIL.ImageFile

    def no_decoding(self):
        raise AssertionError("the router decoded an image")

    monkeypatch.setattr(PIL.ImageFile.ImageFile, "load", no_decoding)
    text = parse_predict(JSONResponse({"inputs": [truncated(), png()]}).body,
                         app["classify"].input_type)
    assert text == [truncated(), png()]


def test_a_corrupt_image_fails_alone_in_the_container_naming_its_index():
    r = _post("classify", [png(), truncated(), png()])
    body = r.json()
    assert r.status_code == 500 and body["error"]["type"] == "endpoint_error"
    (err,) = body["item_errors"]
    assert err["index"] == 1 and "corrupt or truncated PNG image of 32x24" in err["message"]
    assert body["outputs"][1] is None and body["outputs"][0]["label"] == "wide" \
        and body["outputs"][2]["label"] == "wide"


def test_a_requests_images_are_summed_against_its_pixel_budget():
    assert fw.ImageSpec().request_pixels == 4 * fw.ImageSpec().max_pixels
    ok = _post("thumbs", [png((10, 10)), png((10, 10)), png((5, 10))])
    assert ok.status_code == 200 and ok.json()["outputs"] == [100, 100, 50]
    r = _post("thumbs", [png((10, 10)), png((10, 10)), png((10, 10)), "%%%"])
    err = r.json()["error"]
    assert (r.status_code, err["type"], err["field"]) == (413, "too_large", "inputs[2]")
    assert "hold 300 pixels up to this 10x10 one; the limit per request is 250" \
        in err["message"] and "max_request_pixels" in err["message"]


def test_a_batch_fails_the_images_past_its_decoded_pixel_budget():
    """Several requests' images in one batch: those past ImageSpec.max_batch_pixels fail
    alone (an item error), before they are decoded; the others run."""
    items = [[f"r{i}", png((10, 10))] for i in range(3)]
    done, errors = worker.run_batch(app["thumbs"].fn, None, items)
    assert done == [["r0", 100], ["r1", 100]]
    ((item_id, message),) = errors
    assert item_id == "r2" and "would hold 300 pixels decoded" in message \
        and "max_batch_pixels" in message
    done, errors = worker.run_batch(app["thumbs"].fn, None, items[:1])   # a fresh tally
    assert done == [["r0", 100]] and errors == []


def test_image_requests_are_parsed_on_threads_of_their_own():
    """Image parsing never holds up other endpoints' parsing: with every image thread
    busy, a large text body is parsed (in the default pool) and answered."""
    import floodway.http.admit as admit

    busy, release = threading.Barrier(admit.IMAGE_THREADS + 1), threading.Event()

    def hold():
        busy.wait(10)
        release.wait(10)   # a guard against a hang, not a wait

    held = [admit.image_executor().submit(hold) for _ in range(admit.IMAGE_THREADS)]
    busy.wait(10)   # every image thread is taken
    try:
        pairs = [["abcd" * 100, "abxy" * 100]] * 200   # > PARSE_IN_THREAD_BYTES: on a thread
        r = _post("rerank", pairs)
        assert r.status_code == 200 and len(r.json()["outputs"]) == 200
    finally:
        release.set()
    for f in held:
        f.result(10)
    names = []
    parse = admit.parse_images

    def recording(body, ep):
        names.append(threading.current_thread().name)
        return parse(body, ep)

    admit.parse_images = recording
    try:
        assert _post("classify", [png()]).status_code == 200
    finally:
        admit.parse_images = parse
    assert names and names[0].startswith("floodway-images")
