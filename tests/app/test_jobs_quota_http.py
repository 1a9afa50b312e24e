"""Bounded job storage over HTTP (in process): a submit past the job store's quota is a 503
with Retry-After that stores nothing, a finished job's inputs stop counting, and /metrics
shows the bytes held and the submits refused. A manual clock; nothing sleeps."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from tests.app.scripted import ScriptedBackend, client
from tests.app.test_admission_http import poll_job

BIG = "x" * 3000   # ["xxx..."]: 3004 bytes as stored
app = fw.App("quota")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(timeout_s=0.5))
def length(model, texts: list[str]) -> list[int]:
    return [len(t) for t in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(timeout_s=0.5))
def repeat(model, texts: list[str]) -> list[str]:
    return [t * 1000 for t in texts]


def setup(tmp_path, **kw):
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", clock=clock, **kw)
    return clock, backend, jobs, make_asgi_app(app, backend, jobs=jobs, clock=clock)


def _metric(text: str, line_start: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_submit_over_the_quota_is_a_503_with_retry_after_and_metrics_show_it(tmp_path):
    _, backend, jobs, asgi = setup(tmp_path, max_bytes=100_000, max_tenant_bytes=7000)

    async def go():
        async with client(asgi) as c:
            first = [await c.post("/v1/length/jobs", json={"inputs": [BIG]}) for _ in range(2)]
            over = await c.post("/v1/length/jobs", json={"inputs": [BIG]})
            spilled = await c.post("/v1/length", json={"inputs": [BIG]},
                                   headers={"Prefer": "respond-async"})
            full = (await c.get("/metrics")).text
            await jobs.start()
            await poll_job(c, first[0].headers["location"], "succeeded")
            await poll_job(c, first[1].headers["location"], "succeeded")
            await jobs.runner.stop()      # the next job stays queued: its bytes counted
            later = await c.post("/v1/length/jobs", json={"inputs": [BIG]})
            drained = (await c.get("/metrics")).text
            jobs.store.close()
            return first, over, spilled, full, later, drained

    first, over, spilled, full, later, drained = asyncio.run(go())
    assert [r.status_code for r in first] == [202, 202]
    for refused in (over, spilled):
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
        assert refused.json()["error"]["type"] == "unavailable"
        assert "the job store is full" in refused.json()["error"]["message"]
    assert _metric(full, 'floodway_jobs{state="queued"}') == 2      # nothing more stored
    assert _metric(full, "floodway_job_store_bytes ") == 2 * 3004
    assert _metric(full, 'floodway_job_store_tenant_bytes{tenant="anonymous"}') == 2 * 3004
    assert _metric(full, 'floodway_job_store_quota_bytes{scope="tenant"}') == 7000
    assert _metric(full, 'floodway_job_store_rejections_total{reason="tenant"}') == 2
    assert _metric(full, 'floodway_job_store_rejections_total{reason="disk_full"}') == 0
    # Both finished: their inputs were dropped ("[]" kept), their results ([3000]) kept.
    assert later.status_code == 202
    assert _metric(drained, "floodway_job_store_bytes ") == 2 * (2 + 6) + 3004


def test_a_result_past_the_quota_fails_its_job_and_is_not_stored(tmp_path):
    # Four jobs of 6-byte inputs fit at once; their results take 2006 bytes each as stored.
    _, _, jobs, asgi = setup(tmp_path, max_bytes=100_000, max_tenant_bytes=7000)

    async def go():
        async with client(asgi) as c:
            made = [await c.post("/v1/repeat/jobs", json={"inputs": ["ab"]}) for _ in range(4)]
            await jobs.start()
            done = [await poll_job(c, r.headers["location"], "succeeded") for r in made[:3]]
            over = await poll_job(c, made[3].headers["location"], "failed")
            text = (await c.get("/metrics")).text
            await jobs.runner.stop()
            jobs.store.close()
            return made, done, over, text

    made, done, over, text = asyncio.run(go())
    assert [r.status_code for r in made] == [202] * 4
    assert [len(j["outputs"][0]) for j in done] == [2000] * 3
    assert "result of 2004 bytes exceeds the job store's quota" in over["error"]
    assert "7000 bytes" in over["error"] and over.get("outputs") is None
    assert _metric(text, "floodway_job_store_bytes ") <= 7000
    assert _metric(text, 'floodway_job_store_rejections_total{reason="result"}') == 1
