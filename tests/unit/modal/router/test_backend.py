"""The Modal router offline: `ModalBackend` over a recording stand-in for the Modal calls
(class objects, FunctionCalls, Dicts), through the same ASGI app as locally; the stand-ins
serve the other router tests too."""

from __future__ import annotations

import asyncio
import itertools
import json
import types

import httpx
import modal
import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.core.priors import COLD_START_PRIOR_S
from floodway.errors import EndpointError, FloodwayError, Unavailable
from floodway.http.app import make_asgi_app
from floodway.modal.contract import ITEM_ERROR
from floodway.modal.jobs import ModalJobs
from floodway.modal.kv import MemoryKV
from floodway.modal.router.backend import ModalBackend, router_api_keys
from floodway.modal.stats import BOOT_S
from floodway.routers.admission import ApiKeys

app = fw.App("t")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(max_inflight_per_container=2, max_queue=4, timeout_s=1.0),
              warm=fw.WarmPool(min_containers=1, max_containers=2),
              batching=fw.Batching(max_batch_rows=4))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


KEY_A, KEY_B = "key-a-0123456789", "key-b-0123456789"
AUTH_A = {"Authorization": f"Bearer {KEY_A}"}
AUTH_B = {"Authorization": f"Bearer {KEY_B}"}


class FakeModal:
    """Records what the router asks of Modal and answers from a script.

    ``cls()`` is the endpoint's class: ``cls()().predict.remote.aio(row)`` awaits
    `behaviour(row)` (default: the row upper-cased), ``.get_current_stats.aio()`` answers
    `stats`. Every call lands in `calls` as (name, args).
    """

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []
        self.stats = types.SimpleNamespace(backlog=0, num_total_runners=1)
        self.behaviour = self._upper
        self.cancelled: list = []

    @staticmethod
    async def _upper(row):
        if row == "bad":
            raise ValueError("bad row")
        if row == "marked":
            return {ITEM_ERROR: "ValueError: marked row"}
        return row.upper()

    async def _remote(self, row):
        self.calls.append(("predict.remote.aio", (row,)))
        try:
            return await self.behaviour(row)
        except asyncio.CancelledError:
            self.cancelled.append(row)
            raise

    async def _stats(self):
        self.calls.append(("get_current_stats.aio", ()))
        return self.stats

    def cls(self):
        predict = types.SimpleNamespace(remote=types.SimpleNamespace(aio=self._remote),
                                        get_current_stats=types.SimpleNamespace(aio=self._stats))

        def construct():
            self.calls.append(("Cls()", ()))
            return types.SimpleNamespace(predict=predict)
        return construct

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


class FakeCall:
    """A FunctionCall: `state` pending | done | failed | expired."""

    def __init__(self, object_id: str):
        self.object_id = object_id
        self.state, self.value, self.error = "pending", None, None
        self.get = types.SimpleNamespace(aio=self._get)
        self.cancel = types.SimpleNamespace(aio=self._cancel)
        self.gets: list[float | None] = []

    async def _get(self, timeout=None):
        self.gets.append(timeout)
        if self.state == "pending":
            raise TimeoutError()
        if self.state == "expired":
            raise modal.exception.OutputExpiredError()
        if self.state == "failed":
            raise self.error
        if self.state == "unreachable":
            raise modal.exception.ConnectionError("network down")
        return self.value

    async def _cancel(self, terminate_containers=False):
        self.state = "cancelled"


class FakeJobFunction:
    """The ``run_job`` Modal function: ``.spawn.aio(endpoint, inputs)`` records the call and
    registers a new FakeCall (ids as Modal's: ``fc-`` and 26 characters)."""

    def __init__(self):
        self.spawns: list[tuple] = []
        self.registry: dict[str, FakeCall] = {}
        self._ids = itertools.count(1)
        self.spawn = types.SimpleNamespace(aio=self._spawn)

    async def _spawn(self, *args):
        self.spawns.append(args)
        call = FakeCall(f"fc-{next(self._ids):026d}")
        self.registry[call.object_id] = call
        return call

    def from_id(self, job_id: str) -> FakeCall:
        return self.registry[job_id]


def _clock() -> ManualClock:
    return ManualClock(monotonic_s=1000.0)


async def until(cond, turns: int = 200) -> None:
    """Yield to the event loop until `cond()` holds; fails after `turns` turns (nothing
    here waits on a timer: time moves only when a test advances its `ManualClock`)."""
    for _ in range(turns):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"still false after {turns} turns of the event loop")


@pytest.fixture
def fake():
    return FakeModal()


@pytest.fixture
def job_fn():
    return FakeJobFunction()


def _backend(fake, clock=None, kv=None):
    kw = {"clock": clock} if clock else {}
    return ModalBackend(app, {"upper": fake.cls()}, stats=kv or MemoryKV(), **kw)


def _jobs(job_fn, data=None):
    shared = {} if data is None else data
    return ModalJobs(job_fn, dict_factory=lambda name: MemoryKV(shared),
                     call_from_id=job_fn.from_id)


def _client(backend, jobs=None, clock=None):
    kw = {"clock": clock} if clock else {}
    asgi = make_asgi_app(app, backend, jobs=jobs, api_keys=ApiKeys([KEY_A, KEY_B]), **kw)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")


async def _post(c, inputs, path="/v1/upper", headers=None):
    return await c.post(path, content=json.dumps({"inputs": inputs}),
                        headers={"Content-Type": "application/json", **AUTH_A,
                                 **(headers or {})})


# ---------------------------------------------------------------- snapshot

def test_enqueue_counts_a_request_before_it_yields_and_releases_it_unawaited(fake):
    async def go():
        release = asyncio.Event()

        async def slow(row):
            await release.wait()
            return row

        fake.behaviour = slow
        backend = _backend(fake)
        pending = backend.enqueue("upper", list("abc"), timeout_s=5, tenant="t1")
        seen = backend.snapshot("upper").tenant_queued   # no await in between
        release.set()
        for _ in range(100):                             # never awaited: the calls end
            await asyncio.sleep(0)
        left = backend.snapshot("upper").tenant_queued
        return seen, left, backend.readiness()["modal"]["upper"]["inflight_rows"], pending

    seen, left, rows, pending = asyncio.run(go())
    assert seen == {"t1": 1} and left == {} and rows == 0
    # The Pending protocol: Modal cannot hand calls under way to a job.
    assert pending.dispatched() is False
    with pytest.raises(NotImplementedError):
        pending.adopt()


def test_snapshot_reflects_stats_and_inflight(fake):
    gate = asyncio.Event

    async def go():
        release = gate()

        async def slow(row):
            await release.wait()
            return row

        backend = _backend(fake)
        before = backend.snapshot("upper")
        fake.stats = types.SimpleNamespace(backlog=3, num_total_runners=2)
        await backend.refresh("upper")
        idle = backend.snapshot("upper")
        fake.behaviour = slow
        work = asyncio.ensure_future(backend.run("upper", list("abcdef"), timeout_s=5,
                                                 tenant="t1"))
        await until(lambda: fake.count("predict.remote.aio") == 6)
        busy = backend.snapshot("upper")
        release.set()
        out = await work
        return before, idle, busy, backend.snapshot("upper"), out, backend

    before, idle, busy, after, out, backend = asyncio.run(go())
    # No stats yet: the warm pool's min_containers stand in for the runners.
    assert [c.state for c in before.containers] == ["ready"]
    assert (before.max_containers, before.max_queue, before.max_batch_rows) == (2, 4, 4)
    assert before.cold_start_s == COLD_START_PRIOR_S
    assert [c.state for c in idle.containers] == ["ready", "ready"]
    assert all(c.free_slots == 2 and c.backlog_s == 0 for c in idle.containers)
    assert (idle.queued_rows, idle.queued) == (3, 3)
    # Modal's queue is served in arrival order: all of it is ahead of every priority.
    assert (idle.queued_rows_by_priority, idle.queued_by_priority) == ((0, 0, 3), (0, 0, 3))
    assert idle.arrival_rows_per_s == 0.0 and idle.batch_wait_s == 0.005
    # 6 rows in flight over 2 runners: 3 rows each, one batch of 4 -> one slot busy.
    assert all(c.free_slots == 1 and c.slots == 2 and c.backlog_s > 0 for c in busy.containers)
    assert busy.tenant_queued == {"t1": 1}
    # The rows admitted count in the arrival rate (ArrivalRate's 5 s window).
    assert busy.arrival_rows_per_s == pytest.approx(6 / 5)
    assert out == list("abcdef")
    assert after.tenant_queued == {} and backend._eps["upper"].inflight_rows == 0
    assert after.service != before.service          # fitted from the measured request
    assert backend.readiness()["modal"]["upper"]["runners"] == 2


def test_stats_are_cached_and_refreshed_in_the_background(fake):
    clock = _clock()

    async def go():
        backend = _backend(fake, clock)
        backend.snapshot("upper")                   # starts a refresh, answers at once
        backend.snapshot("upper")                   # one is running: no second one
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        n1 = fake.count("get_current_stats.aio")
        clock.advance(0.5)
        backend.snapshot("upper")                   # fresh enough
        await asyncio.sleep(0)
        n2 = fake.count("get_current_stats.aio")
        clock.advance(1.0)
        backend.snapshot("upper")                   # older than stats_ttl_s
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return n1, n2, fake.count("get_current_stats.aio"), backend

    n1, n2, n3, backend = asyncio.run(go())
    assert (n1, n2, n3) == (1, 1, 2)
    assert backend.readiness()["modal"]["upper"]["stats_age_s"] == 0.0


def test_stats_failure_keeps_serving(fake):
    async def broken():
        raise modal.exception.ConnectionError("no route")

    async def go():
        fake._stats = broken
        backend = _backend(fake)
        await backend.refresh("upper")
        return backend

    backend = asyncio.run(go())
    detail = backend.readiness()
    assert detail["ready"] is True
    assert "ConnectionError" in detail["modal"]["upper"]["error"]
    assert len(backend.snapshot("upper").containers) == 1      # min_containers prior


def test_cold_start_is_measured_with_a_prior(fake):
    kv = MemoryKV({"cold:upper": [{"init_s": 4.0, "at": 1}, {"init_s": 6.5, "at": 2}]})

    async def go():
        backend = _backend(fake, kv=kv)
        before = backend.cold_start_s("upper")
        await backend.refresh("upper")
        return before, backend.cold_start_s("upper")

    assert asyncio.run(go()) == (COLD_START_PRIOR_S, BOOT_S + 6.5)


def test_cold_start_before_any_sample_comes_from_the_builds_probe_on_the_volume(fake,
                                                                                 tmp_path):
    from floodway.core.estimators import build_start_s
    from tests.unit.build.test_starts import fake_build

    fake_build(tmp_path, endpoint="upper", cold_start_s=0.8)
    kv = MemoryKV({"cold:upper": [{"init_s": 9.0, "at": 1}]})

    async def go():
        backend = ModalBackend(app, {"upper": fake.cls()}, stats=kv, store=tmp_path)
        before = backend.cold_start_s("upper")
        await backend.refresh("upper")
        return before, backend.cold_start_s("upper")

    # Modal's boot stays the floor; the published starts replace the build's figure.
    assert asyncio.run(go()) == (BOOT_S + build_start_s(0.8), BOOT_S + 9.0)


def test_start_cold_counts_until_max_containers(fake):
    clock = _clock()
    backend = _backend(fake, clock)
    assert backend.start_cold("upper") is True              # 1 runner (prior) + 1 asked
    assert backend.start_cold("upper") is False             # max_containers is 2
    snap = backend.snapshot("upper")
    starting = [c for c in snap.containers if c.state == "starting"]
    assert len(starting) == 1 and starting[0].ready_in_s == COLD_START_PRIOR_S
    clock.advance(COLD_START_PRIOR_S)                          # its cold start has passed
    assert not [c for c in backend.snapshot("upper").containers if c.state == "starting"]
    assert fake.count("predict.remote.aio") == 0            # no Modal call: the autoscaler


def test_snapshot_slots_are_the_pipeline_depth():
    wide = fw.App("wide")

    @wide.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
                   route=fw.Route(max_inflight_per_container=8),
                   warm=fw.WarmPool(min_containers=2))
    def up(model, texts: list[str]) -> list[str]:
        return texts

    backend = ModalBackend(wide, {"up": FakeModal().cls()}, stats=MemoryKV())
    snap = backend.snapshot("up")
    assert [(c.slots, c.free_slots) for c in snap.containers] == [(2, 2), (2, 2)]


def test_batch_listeners_are_accepted_and_never_called(fake):
    calls = []
    backend = _backend(fake)
    backend.add_batch_listener(lambda *a: calls.append(a))
    assert asyncio.run(backend.run("upper", ["a", "b"], timeout_s=5)) == ["A", "B"]
    assert calls == []


# ---------------------------------------------------------------- sync dispatch

def test_dispatch_calls_remote_once_per_row(fake):
    async def go():
        backend = _backend(fake)
        await backend.refresh("upper")
        async with _client(backend) as c:
            return await _post(c, ["a", "b", "c"])

    r = asyncio.run(go())
    assert r.status_code == 200 and r.json() == {"outputs": ["A", "B", "C"]}
    rows = [args for name, args in fake.calls if name == "predict.remote.aio"]
    assert sorted(rows) == [("a",), ("b",), ("c",)]


def test_big_backlog_at_max_runners_sheds_503(fake):
    async def go():
        backend = _backend(fake)
        fake.stats = types.SimpleNamespace(backlog=1000, num_total_runners=2)
        await backend.refresh("upper")
        async with _client(backend) as c:
            return await _post(c, ["a"])

    r = asyncio.run(go())
    assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded"
    assert int(r.headers["retry-after"]) >= 1
    assert fake.count("predict.remote.aio") == 0


def test_big_backlog_spills_to_a_modal_job(fake, job_fn):
    async def go():
        backend = _backend(fake)
        fake.stats = types.SimpleNamespace(backlog=1000, num_total_runners=2)
        await backend.refresh("upper")
        async with _client(backend, _jobs(job_fn)) as c:
            return await _post(c, ["a"])

    r = asyncio.run(go())
    assert r.status_code == 202 and r.headers["location"].startswith("/v1/jobs/fc-")
    assert job_fn.spawns == [("upper", ["a"])]


def test_a_bad_row_fails_alone(fake):
    async def go():
        backend = _backend(fake)
        async with _client(backend) as c:
            return await _post(c, ["a", "bad", "marked", "d"])

    r = asyncio.run(go())
    assert r.status_code == 500
    body = r.json()
    assert body["outputs"] == ["A", None, None, "D"]
    assert [e["index"] for e in body["item_errors"]] == [1, 2]
    assert "ValueError: bad row" in body["item_errors"][0]["message"]
    assert "marked row" in body["item_errors"][1]["message"]


def test_run_maps_modal_errors_per_row(fake):
    async def behaviour(row):
        if row == "flaky":
            raise modal.exception.ConnectionError("reset")
        if row == "slow-on-modal":
            raise modal.exception.FunctionTimeoutError("took too long")
        return row

    fake.behaviour = behaviour
    out = asyncio.run(_backend(fake).run("upper", ["ok", "flaky", "slow-on-modal"],
                                         timeout_s=1))
    assert out[0] == "ok"
    assert isinstance(out[1], Unavailable)
    assert isinstance(out[2], EndpointError) and "FunctionTimeoutError" in str(out[2])


def test_timeout_cancels_pending_calls(fake):
    async def go():
        gate = asyncio.Event()                          # never set: only the timeout ends it

        async def behaviour(row):
            if row == "slow":
                await gate.wait()
            return row

        fake.behaviour = behaviour
        clock = ManualClock()
        backend = _backend(fake, clock)
        work = asyncio.ensure_future(
            backend.run("upper", ["fast", "slow", "slow"], timeout_s=0.05, tenant="t"))
        await until(lambda: fake.count("predict.remote.aio") == 3 and clock.sleeping == 1)
        clock.advance(0.04)                             # not yet: still waiting
        await until(lambda: clock.sleeping == 1)
        early = work.done()
        clock.advance(0.02)                             # past the timeout
        with pytest.raises(TimeoutError, match="within 0.05 s"):
            await work
        await asyncio.sleep(0)
        # Seen inside the loop: leaving asyncio.run would cancel any call left running.
        return (early, list(fake.cancelled), backend._eps["upper"].inflight_rows,
                backend.snapshot("upper").tenant_queued, clock.sleeping)

    early, cancelled, rows, tenants, sleeping = asyncio.run(go())
    assert early is False
    assert cancelled == ["slow", "slow"]
    assert rows == 0 and tenants == {}
    assert sleeping == 0                                # the timer went with the request


def test_deadline_through_http_is_504(fake):
    async def go():
        gate = asyncio.Event()                          # never set: only the deadline ends it

        async def behaviour(row):
            await gate.wait()

        fake.behaviour = behaviour
        clock = ManualClock()                           # the app's and the backend's time
        async with _client(_backend(fake, clock), clock=clock) as c:
            req = asyncio.ensure_future(_post(c, ["a"], headers={"X-Deadline-Ms": "200"}))
            await until(lambda: fake.count("predict.remote.aio") == 1 and clock.sleeping == 1)
            clock.advance(0.1)
            await until(lambda: clock.sleeping == 1)
            early = req.done()
            clock.advance(0.1)                          # the 200 ms deadline
            r = await req
            await asyncio.sleep(0)
            return r, early, list(fake.cancelled)       # before asyncio.run cancels the rest

    r, early, cancelled = asyncio.run(go())
    assert early is False
    assert r.status_code == 504
    assert cancelled == ["a"]


def test_router_needs_keys_unless_public():
    with pytest.raises(FloodwayError, match="FLOODWAY_PUBLIC_ROUTER=1"):
        router_api_keys({})
    assert not router_api_keys({"FLOODWAY_PUBLIC_ROUTER": "1"})
    assert len(router_api_keys({"FLOODWAY_API_KEYS": f"{KEY_A},{KEY_B}"})) == 2


def test_modal_backend_and_pending_implement_the_backend_protocols():
    import inspect

    from floodway.core.backend import Backend, Pending
    from floodway.modal.router.calls import ModalPending

    for proto, impl in ((Backend, ModalBackend), (Pending, ModalPending)):
        for name, member in vars(proto).items():
            if name.startswith("_") and name != "__await__" or not callable(member):
                continue
            want = inspect.signature(member).parameters
            got = inspect.signature(getattr(impl, name)).parameters
            assert list(got) == list(want), (impl.__name__, name)
