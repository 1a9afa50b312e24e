"""The response cache over HTTP (in process): only the items it does not hold are decided
on and run, the answer assembled in order; Cache-Control; the header; /metrics; the
hand-off. A scripted backend and a manual clock: nothing waits on real time."""

from __future__ import annotations

import asyncio
import contextlib
import re

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from floodway.routers.admission import ApiKeys
from tests.app.scripted import ScriptedBackend, advance_when, client

app = fw.App("cached")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(timeout_s=0.5),
              cache=fw.Cache(max_bytes=1 << 20, ttl_s=60))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40))
def plain(model, texts: list[str]) -> list[str]:     # the default: cached
    return [t + "!" for t in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), cache=False)
def sampled(model, texts: list[str]) -> list[str]:
    return texts


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40))
def vectors(model, texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), 1.0] for t in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              cache=fw.Cache(shared_across_tenants=True))
def public(model, texts: list[str]) -> list[str]:
    return texts


HITS = "x-floodway-cache-hits"


class Untouchable(ScriptedBackend):
    """Fails the test if the request reaches it at all (not even for a decision)."""

    def snapshot(self, endpoint):
        raise AssertionError("snapshot() asked for a request the cache answers whole")

    def enqueue(self, *a, **kw):
        raise AssertionError("enqueue() for a request the cache answers whole")


def setup(builds=None, backend_cls=ScriptedBackend, jobs_path=None, **kw):
    clock = ManualClock()
    backend = backend_cls(app, clock)
    builds = {name: "k1" for name in app.endpoints} if builds is None else builds
    jobs = None if jobs_path is None else LocalJobs(app, backend, jobs_path, clock=clock)
    asgi = make_asgi_app(app, backend, jobs=jobs, clock=clock, build_key=builds.get,
                         **kw)
    return clock, backend, jobs, asgi


def post(c, inputs, path="/v1/upper", **headers):
    return c.post(path, json={"inputs": inputs}, headers=headers)


def test_ten_items_with_seven_cached_run_three_in_order():
    _, backend, _, asgi = setup()
    seven = [f"t{i}" for i in range(7)]
    inputs = ["n0", "t0", "t1", "n1", "t2", "t3", "t4", "n2", "t5", "t6"]

    async def go():
        async with client(asgi) as c:
            first = await post(c, seven)
            return first, await post(c, inputs)

    first, r = asyncio.run(go())
    assert first.headers[HITS] == "0"
    assert r.status_code == 200 and r.json() == {"outputs": [x.upper() for x in inputs]}
    assert r.headers[HITS] == "7"
    assert [call[1] for call in backend.calls] == [seven, ["n0", "n1", "n2"]]


def test_a_request_answered_whole_touches_no_backend_and_makes_no_decision():
    _, backend, _, asgi = setup()

    async def go():
        async with client(asgi) as c:
            await post(c, ["a", "b"])
            backend.__class__ = Untouchable      # from now on any call fails the test
            return await post(c, ["b", "a", "b"])

    r = asyncio.run(go())
    assert r.status_code == 200 and r.json() == {"outputs": ["B", "A", "B"]}
    assert r.headers[HITS] == "3" and "x-floodway-decision" not in r.headers


def test_no_cache_runs_again_and_no_store_keeps_the_answer_out():
    _, backend, _, asgi = setup()

    async def go():
        async with client(asgi) as c:
            await post(c, ["a"])
            bypass = await post(c, ["a"], **{"Cache-Control": "No-Cache"})
            kept_out = await post(c, ["b"], **{"Cache-Control": "max-age=0, no-store"})
            again = await post(c, ["b"])
            return bypass, kept_out, again

    bypass, kept_out, again = asyncio.run(go())
    assert bypass.headers[HITS] == "0" and again.headers[HITS] == "0"
    assert [call[1] for call in backend.calls] == [["a"], ["a"], ["b"], ["b"]]
    assert bypass.json() == {"outputs": ["A"]} and kept_out.json() == {"outputs": ["B"]}


def test_failed_items_are_not_cached():
    _, backend, _, asgi = setup()
    backend.mode = "one_bad"

    async def go():
        async with client(asgi) as c:
            first = await post(c, ["ok", "bad"])
            backend.mode = "ok"
            return first, await post(c, ["ok", "bad"])

    first, second = asyncio.run(go())
    assert first.status_code == 500 and first.json()["outputs"] == ["OK", None]
    assert second.status_code == 200 and second.headers[HITS] == "1"
    assert backend.calls[-1][1] == ["bad"]


def test_a_new_build_runs_again_and_a_rollout_caches_nothing():
    builds = {"upper": "k1"}
    _, backend, _, asgi = setup(builds)

    async def go():
        async with client(asgi) as c:
            await post(c, ["a"])
            builds["upper"] = "k2"
            new = await post(c, ["a"])
            builds["upper"] = None               # two builds serving: a rollout
            rolling = [await post(c, ["z"]), await post(c, ["z"])]
            return new, rolling

    new, rolling = asyncio.run(go())
    assert new.headers[HITS] == "0" and HITS not in rolling[1].headers
    assert [call[1] for call in backend.calls] == [["a"], ["a"], ["z"], ["z"]]


def test_defaults_and_the_switch():
    _, backend, _, asgi = setup()

    async def go():
        async with client(asgi) as c:
            for path in ("/v1/plain", "/v1/sampled"):
                await post(c, ["a"], path)
                await post(c, ["a"], path)

    asyncio.run(go())
    assert [call[0] for call in backend.calls] == ["plain", "sampled", "sampled"]


def test_without_a_build_key_nothing_is_cached():
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    asgi = make_asgi_app(app, backend, clock=clock)

    async def go():
        async with client(asgi) as c:
            return [await post(c, ["a"]), await post(c, ["a"])]

    answers = asyncio.run(go())
    assert len(backend.calls) == 2 and all(HITS not in r.headers for r in answers)


def _metric(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{re.escape(want)}}} (\S+)$", text, re.M)
    assert m, f"{name}{{{want}}} not in /metrics"
    return float(m.group(1))


def test_metrics_count_hits_misses_bytes_and_evictions():
    _, _, _, asgi = setup()

    async def go():
        async with client(asgi) as c:
            await post(c, ["a", "b"])
            await post(c, ["a", "c"], **{"Cache-Control": "no-store"})
            await post(c, ["a"], **{"Cache-Control": "no-cache"})
            return (await c.get("/metrics")).text

    text = asyncio.run(go())
    assert _metric(text, "floodway_cache_hits_total", endpoint="upper") == 1
    assert _metric(text, "floodway_cache_misses_total", endpoint="upper") == 3
    assert _metric(text, "floodway_cache_bypassed_total", endpoint="upper") == 1
    assert _metric(text, "floodway_cache_entries", endpoint="upper") == 2
    assert _metric(text, "floodway_cache_bytes", endpoint="upper") > 2 * 32
    assert _metric(text, "floodway_cache_evictions_total", endpoint="upper",
                   reason="size") == 0
    assert 'endpoint="sampled"' not in "".join(
        line for line in text.splitlines() if line.startswith("floodway_cache_"))


def test_a_handed_off_request_keeps_its_cached_outputs_in_the_jobs_result(tmp_path):
    clock, backend, jobs, asgi = setup(jobs_path=tmp_path / "jobs.sqlite3")

    async def go():
        await jobs.start()
        try:
            async with client(asgi) as c:
                await post(c, ["a"])
                backend.mode = "on_container"   # dispatched, answered 0.8 s on: past 0.5 s
                r = asyncio.ensure_future(post(c, ["a", "b"]))
                await advance_when(clock, lambda: len(backend.calls) == 2, 0.47)
                r = await r
                clock.advance(0.4)
                job: dict = {}

                async def done():
                    nonlocal job
                    job = (await c.get(r.headers["location"])).json()
                    return job["status"] == "succeeded"
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(20):
                        while not await done():
                            await asyncio.sleep(0)
                return r, job
        finally:
            await jobs.stop()

    r, job = asyncio.run(go())
    assert r.status_code == 202 and r.headers["x-floodway-handoff"] == "deadline"
    assert backend.calls[1][1] == ["b"]            # only the miss ran
    assert job["outputs"] == ["A", "B"]





def test_withdrawing_an_adopted_requests_work_cancels_the_miss_under_way():
    """A job queue that cannot adopt (Modal's) cancels the work it was given at once:
    the run of the items the cache did not hold must stop too."""
    from floodway.cache import ResponseCache
    from floodway.http.handlers import Handlers

    async def go():
        cache = ResponseCache(app, {"upper": "k1"}.get, monotonic=lambda: 0.0,
                              wall=lambda: 0.0)
        h = Handlers.__new__(Handlers)
        h.cache = cache
        look = await cache.lookup("upper", ["a"])
        under_way = asyncio.ensure_future(asyncio.Event().wait())
        asyncio.ensure_future(h._cached_later(look, under_way)).cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return under_way

    assert asyncio.run(go()).cancelled()


TENANT_A, TENANT_B = {"Authorization": "Bearer key-of-a"}, {"Authorization": "Bearer key-of-b"}


def test_with_api_keys_a_tenant_never_gets_a_hit_for_what_another_asked():
    _, backend, _, asgi = setup(api_keys=ApiKeys(["key-of-a", "key-of-b"]))
    embed = {"model": "vectors", "input": ["what a asked"]}

    async def go():
        async with client(asgi) as c:
            native = [await post(c, ["what a asked"], **TENANT_A),
                      await post(c, ["what a asked"], **TENANT_B),
                      await post(c, ["what a asked"], **TENANT_A)]
            oa = [await c.post("/v1/embeddings", json=embed, headers=h)
                  for h in (TENANT_A, TENANT_B, TENANT_A)]
            shared = [await post(c, ["news"], "/v1/public", **h) for h in (TENANT_A, TENANT_B)]
            return native, oa, shared

    native, oa, shared = asyncio.run(go())
    assert [r.headers[HITS] for r in native] == ["0", "0", "1"]
    assert [r.headers[HITS] for r in oa] == ["0", "0", "1"]
    assert [call[0] for call in backend.calls[:5]] == ["upper", "upper", "vectors", "vectors",
                                                         "public"]
    assert [r.headers[HITS] for r in shared] == ["0", "1"]   # the endpoint opted in

