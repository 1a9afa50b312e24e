"""The Modal warmers offline: the generated cron functions (names, schedules, time zones),
their bodies run against a recording stand-in for ``update_autoscaler`` and in-memory Dicts,
the router's per-minute arrival counts."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
import types
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import httpx
import modal
import pytest
from croniter import croniter
from modal._utils.async_utils import synchronizer

import floodway as fw
from floodway.core.priors import COLD_START_PRIOR_S, SERVICE_PRIOR
from floodway.http.app import make_asgi_app
from floodway.http.clock import ManualClock
from floodway.modal import autoscaler
from floodway.modal.kv import MemoryKV, MemoryStore
from floodway.modal.router import units
from floodway.modal.router.backend import STATS_DICT, ModalBackend
from floodway.modal.stats import BOOT_S
from floodway.modal.traffic import ArrivalRecorder, scan_traffic
from floodway.modal.warmers import apply
from floodway.modal.warmers.apply import REAPPLY_S, Stores, run_warmer
from floodway.modal.warmers.plan import TICK_NAME, WarmerSpec, warmer_plan
from floodway.routers.admission import ApiKeys
from floodway.warmers.target import minute_of
from tests.unit.modal.router.test_backend import (
    AUTH_A,
    KEY_A,
    FakeJobFunction,
    FakeModal,
    _jobs,
    until,
)
from tests.unit.modal.router.test_backend import app as router_app

NY_9AM = fw.Window(cron="0 9 * * 1-5", duration_s=3600, min_containers=3,
                   timezone="America/New_York", lead_s=60)


def _app(tmp_path) -> fw.App:
    app = fw.App("warmers")
    model = fw.LocalModel(tmp_path)

    @app.endpoint(model=model, warm=fw.WarmPool(buffer_containers=1, max_containers=5,
                                                scaledown_window_s=120, windows=[NY_9AM]))
    def sched(model, inputs: list[str]) -> list[str]:
        return inputs

    @app.endpoint(model=model, warm=fw.WarmPool(min_containers=1, windows=[NY_9AM]))
    def twin(model, inputs: list[str]) -> list[str]:
        return inputs

    @app.endpoint(model=model, warm=fw.WarmPool(predictive=True, max_containers=6),
                  route=fw.Route(max_inflight_per_container=1))
    def pred(model, inputs: list[str]) -> list[str]:
        return inputs

    @app.endpoint(model=model)
    def plain(model, inputs: list[str]) -> list[str]:
        return inputs

    return app


class Recorder:
    """The stand-in for ``Cls().update_autoscaler``: records (endpoint, settings)."""

    def __init__(self, log=None, fail: str | None = None):
        self.calls: list[tuple[str, dict]] = []
        self.log = log if log is not None else []
        self.fail = fail

    def __call__(self, endpoint, settings):
        if endpoint == self.fail:
            raise modal.exception.ConnectionError("no route")
        self.calls.append((endpoint, settings))
        self.log.append(("update_autoscaler", endpoint, settings))


def _stores(traffic=None, stats=None) -> Stores:
    return Stores(warm=MemoryStore(), traffic=MemoryStore(traffic), stats=MemoryStore(stats))


def _utc(*args) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def _next_fire(spec: WarmerSpec, after_s: float) -> float:
    start = datetime.fromtimestamp(after_s, tz=UTC).astimezone(ZoneInfo(spec.timezone))
    return croniter(spec.cron, start).get_next(datetime).timestamp()


# ---------------------------------------------------------------- the plan

def test_plan_shares_cron_expressions_and_ticks_for_predictive(tmp_path):
    plan = warmer_plan(_app(tmp_path))
    # 09:00 minus lead 60 s minus the 30 s cold-start prior, rounded out: 08:58 New York.
    assert plan == [
        WarmerSpec("warm_cron_0", "58 8 * * 1-5", "America/New_York", ("sched", "twin"),
                   ("sched:start", "twin:start")),
        WarmerSpec("warm_cron_1", "0 10 * * 1-5", "America/New_York", ("sched", "twin"),
                   ("sched:end", "twin:end")),
        WarmerSpec(TICK_NAME, "* * * * *", "UTC", ("pred",)),
    ]


def test_plan_falls_back_to_the_tick(tmp_path):
    plan = warmer_plan(_app(tmp_path), max_window_crons=1)
    assert plan == [WarmerSpec(TICK_NAME, "* * * * *", "UTC", ("sched", "twin", "pred"))]
    # The first of the month at 00:00 minus the lead crosses into an unknown day of month.
    app = fw.App("monthly")
    app.endpoint(model=fw.LocalModel(tmp_path), name="monthly", warm=fw.WarmPool(windows=[
        fw.Window(cron="0 0 1 * *", duration_s=600, min_containers=2)]))(lambda m, x: x)
    assert warmer_plan(app) == [WarmerSpec(TICK_NAME, "* * * * *", "UTC", ("monthly",))]


def test_no_warmers_without_windows_or_prediction(tmp_path):
    app = fw.App("static")
    app.endpoint(model=fw.LocalModel(tmp_path), name="fixed",
                 warm=fw.WarmPool(min_containers=2))(lambda m, x: x)
    assert warmer_plan(app) == []


# ---------------------------------------------------------------- the generated functions

def _impl(obj):
    return synchronizer._translate_in(obj)


def _schedule(function) -> modal.Cron:
    load = _impl(function)._load
    cells = dict(zip(load.__code__.co_freevars, load.__closure__, strict=True))
    return cells["schedule"].cell_contents


@pytest.fixture
def deployed(tmp_path, monkeypatch):
    """A deploy file calling `to_modal` on `_app`, imported as Modal's CLI imports it."""
    path = tmp_path / "fw_deploy_warm.py"
    path.write_text("from floodway.deploy import to_modal\napp = to_modal(fw_app)  # noqa\n")
    spec = importlib.util.spec_from_file_location("fw_deploy_warm", path)
    module = importlib.util.module_from_spec(spec)
    module.fw_app = _app(tmp_path)
    monkeypatch.setitem(sys.modules, "fw_deploy_warm", module)
    monkeypatch.delenv("FLOODWAY_NO_MODAL", raising=False)
    spec.loader.exec_module(module)
    return module


def test_generated_cron_functions(deployed):
    expected = {"warm_cron_0": ("58 8 * * 1-5", "America/New_York"),
                "warm_cron_1": ("0 10 * * 1-5", "America/New_York"),
                TICK_NAME: ("* * * * *", "UTC")}
    for name, (cron, tz) in expected.items():
        fn = getattr(deployed, name)
        assert isinstance(fn, modal.Function)
        proto = _schedule(fn).proto_message.cron
        assert (proto.cron_string, proto.timezone) == (cron, tz)
        assert fn.info().gpus == []                     # CPU functions
        source = _impl(fn)._source_info
        assert (source.module_name, source.implementation_name) == ("fw_deploy_warm", name)
        assert not source.is_serialized()
    assert not hasattr(deployed, "warm_cron_2")


def test_example_app_has_its_window_crons():
    import modal_app

    assert _schedule(modal_app.warm_cron_0).proto_message.cron.cron_string == "53 8 * * 1-5"
    assert _schedule(modal_app.warm_cron_1).proto_message.cron.cron_string == "55 9 * * 1-5"
    assert not hasattr(modal_app, TICK_NAME)            # embed is not predictive


@pytest.fixture
def on_modal(monkeypatch):
    """The bodies' Modal lookups replaced: in-memory Dicts, a recording autoscaler, a clock."""
    stores, autoscale, clock = _stores(), Recorder(), types.SimpleNamespace(t=0.0)
    monkeypatch.setattr(apply, "modal_stores", lambda: stores)
    monkeypatch.setattr(autoscaler, "class_autoscale", lambda classes: autoscale)
    monkeypatch.setattr(apply, "time", types.SimpleNamespace(time=lambda: clock.t))
    return stores, autoscale, clock


def test_window_crons_raise_then_drop_the_floor(deployed, on_modal):
    stores, autoscale, clock = on_modal
    start_spec, end_spec, _ = warmer_plan(deployed.fw_app)
    sunday = _utc(2025, 1, 5, 12)
    start_body = _impl(deployed.warm_cron_0)._raw_f
    end_body = _impl(deployed.warm_cron_1)._raw_f

    clock.t = _next_fire(start_spec, sunday)
    assert clock.t == _utc(2025, 1, 6, 13, 58)          # Monday 08:58 in New York (EST)
    out = start_body()
    assert [(a["endpoint"], a["called"]) for a in out] == [("sched", True), ("twin", True)]
    assert autoscale.calls == [
        ("sched", {"min_containers": 3, "buffer_containers": 1, "scaledown_window": 120}),
        ("twin", {"min_containers": 3, "buffer_containers": 0, "scaledown_window": 60})]
    assert "opens in 120 s" in out[0]["reason"] and "kept by Modal while active" in out[0]["reason"]

    clock.t = _next_fire(end_spec, clock.t)
    assert clock.t == _utc(2025, 1, 6, 15)              # 10:00 in New York
    end_body()
    assert autoscale.calls[2:] == [
        ("sched", {"min_containers": 0, "buffer_containers": 1, "scaledown_window": 120}),
        ("twin", {"min_containers": 1, "buffer_containers": 0, "scaledown_window": 60})]
    assert stores.warm.get(("applied", "warmers", "sched"))["settings"]["min_containers"] == 0


def test_summer_time_moves_the_utc_instant(tmp_path):
    start_spec = warmer_plan(_app(tmp_path))[0]
    assert _next_fire(start_spec, _utc(2025, 7, 6, 12)) == _utc(2025, 7, 7, 12, 58)   # EDT


def test_no_call_while_the_target_is_unchanged(deployed, on_modal):
    stores, autoscale, clock = on_modal
    body = _impl(deployed.warm_cron_0)._raw_f
    clock.t = _utc(2025, 1, 6, 13, 58)
    body()
    again = body()
    assert [a["called"] for a in again] == [False, False]
    assert len(autoscale.calls) == 2
    clock.t += 60                                       # still warm, same settings
    assert [a["called"] for a in body()] == [False, False]
    clock.t += REAPPLY_S                                # stale: a deploy may have reset them
    assert [a["called"] for a in body()] == [True, True]
    assert len(autoscale.calls) == 4


def test_measured_cold_start_below_the_schedule_still_warms_at_the_edge(tmp_path):
    app = _app(tmp_path)
    stores = _stores(stats={"cold:sched": [{"init_s": 1.0, "at": 0}]})   # 6 s measured
    autoscale = Recorder()
    run_warmer(app, ["sched"], autoscale=autoscale, stores=stores,
               now_s=_utc(2025, 1, 6, 13, 58))
    assert autoscale.calls[0][1]["min_containers"] == 3


def _minutes(counts: dict[int, int]) -> dict:
    return {("arrivals", "warmers", "pred", "r1"): counts}


def test_predictive_tick_sets_a_floor_and_keeps_its_state(deployed, on_modal):
    stores, autoscale, clock = on_modal
    now = _utc(2025, 1, 6, 12)
    m = minute_of(now)
    # 30 busy minutes at 12000 arrivals a minute: 200/s x the prior's 0.18 s per batch of
    # 32 rows (one row per request: 32 per container at once) -> 2.
    stores.traffic.data.update(_minutes({m - i: 12000 for i in range(30)}))
    stores.traffic.data[("arrivals", "warmers", "pred", "gone")] = {m - 3000: 5}
    stores.traffic.data[("arrivals", "other-app", "pred", "r9")] = {m - 3000: 5}
    tick = _impl(getattr(deployed, TICK_NAME))._raw_f

    clock.t = now
    (first,) = tick()
    assert first["endpoint"] == "pred" and first["called"]
    assert first["settings"]["min_containers"] == 2
    assert "Little's law 2" in first["reason"]
    state = json.loads(stores.warm.get(("state", "warmers", "pred")))
    assert state["sizing"]["containers"] == 2
    # The tick prunes routers gone for a day, of this app only.
    assert ("arrivals", "warmers", "pred", "gone") not in stores.traffic.data
    assert ("arrivals", "other-app", "pred", "r9") in stores.traffic.data

    # Traffic stops: once the peak has left the sizing's rate window (15 min by default), the
    # stored hysteresis state holds 2 for the downscale delay (3600 s by default). The same
    # settings are applied again here only because REAPPLY_S has passed.
    later = now + 20 * 60
    clock.t = later
    (held,) = tick()
    assert held["settings"] == first["settings"] and later - now >= REAPPLY_S
    assert "held by hysteresis" in held["reason"]
    fresh = run_warmer(deployed.fw_app, ["pred"], autoscale=Recorder(),
                       stores=Stores(MemoryStore(), stores.traffic, MemoryStore()),
                       now_s=later)
    assert fresh[0].settings["min_containers"] < 2        # without the state: no hold
    clock.t = later + 3601
    (dropped,) = tick()
    assert dropped["called"] and dropped["settings"]["min_containers"] < 2
    # Applied at the start, re-applied unchanged after REAPPLY_S, applied at the drop.
    assert [c[0] for c in autoscale.calls] == ["pred", "pred", "pred"]


def test_one_failing_endpoint_does_not_stop_the_others(tmp_path):
    app, stores = _app(tmp_path), _stores()
    autoscale = Recorder(fail="sched")
    out = run_warmer(app, ["sched", "twin", "nope"], autoscale=autoscale, stores=stores,
                     now_s=_utc(2025, 1, 6, 13, 58))
    assert [(a.endpoint, a.called, bool(a.error)) for a in out] == [
        ("sched", False, True), ("twin", True, False)]
    assert "ConnectionError" in out[0].error
    assert stores.warm.get(("applied", "warmers", "sched")) is None   # retried next time


def test_measured_cold_start_is_the_routers():
    assert apply.STATS_DICT == STATS_DICT
    # One estimate from the samples, BOOT_S included, for the router and the warmers.
    assert apply.cold_estimator is units.cold_estimator


def test_little_sizing_uses_the_routers_measured_batch_time(tmp_path):
    app = _app(tmp_path)
    now = _utc(2025, 1, 6, 12)
    m = minute_of(now)
    traffic = _minutes({m - i: 3600 for i in range(30)})     # 60 requests/s
    prior = run_warmer(app, ["pred"], autoscale=Recorder(), now_s=now,
                       stores=_stores(traffic=dict(traffic)))
    # A router measured 0.2 s per batch of 8 rows, 1 row per request: 40 requests/s per
    # container, so 60/s needs two (the prior, 0.18 s per batch of 32, serves 178/s: one).
    stats = {"service:pred": {"batch_s": 0.2, "batch_rows": 8, "rows_per_request": 1.0}}
    measured = run_warmer(app, ["pred"], autoscale=Recorder(), now_s=now,
                          stores=_stores(traffic=dict(traffic), stats=stats))
    assert prior[0].settings["min_containers"] == 1
    assert measured[0].settings["min_containers"] == 2
    ep = app.endpoints["pred"]
    got = apply.measured_of(ep, MemoryStore(stats))
    assert (got.service_s, got.concurrency) == (0.2, 8.0)
    # Without a measurement: the priors of floodway.core, as the local pool sizes.
    none = apply.measured_of(ep, MemoryStore())
    assert (none.cold_start_s, none.service_s, none.concurrency) == (
        COLD_START_PRIOR_S, SERVICE_PRIOR.seconds(32), 32.0)
    cold = apply.measured_of(ep, MemoryStore({"cold:pred": [{"init_s": 7.0}]}))
    assert cold.cold_start_s == BOOT_S + 7.0


def test_the_router_publishes_its_batch_time_for_the_warmers():
    fake, kv = FakeModal(), MemoryKV()
    backend = ModalBackend(router_app, {"upper": fake.cls()}, stats=kv)

    async def go():
        await backend.run("upper", ["a", "b"], timeout_s=5)
        await backend.refresh("upper")
        return await kv.get("service:upper")

    svc = asyncio.run(go())
    assert svc["batch_rows"] == router_app.endpoints["upper"].batching.max_batch_rows
    assert svc["batch_s"] > 0 and svc["rows_per_request"] == 2.0 and svc["samples"] == 1


# ---------------------------------------------------------------- the router's arrivals

def test_recorder_aggregates_per_minute_and_rewrites_idempotently():
    data: dict = {}
    rec = ArrivalRecorder("warmers", MemoryKV(data), router_id="r1")
    t0 = _utc(2025, 1, 6, 12)
    for dt in (0, 10, 59.9):
        rec.record("pred", t0 + dt)
    rec.record("pred", t0 + 60)
    rec.record("sched", t0 + 5)
    assert asyncio.run(rec.flush()) == 2
    m = minute_of(t0)
    assert data[("arrivals", "warmers", "pred", "r1")] == {m: 3, m + 1: 1}
    assert data[("arrivals", "warmers", "sched", "r1")] == {m: 1}
    assert asyncio.run(rec.flush()) == 0                # nothing new: no write
    rec.record("pred", t0 + 70)
    asyncio.run(rec.flush())
    assert data[("arrivals", "warmers", "pred", "r1")] == {m: 3, m + 1: 2}   # not 3

    other = ArrivalRecorder("warmers", MemoryKV(data), router_id="r2")
    other.record("pred", t0 + 80)
    asyncio.run(other.flush())
    hist, stale = scan_traffic(MemoryStore(data), "warmers", ["pred", "sched"], t0 + 90,
                               minutes=5)
    assert hist["pred"].counts.tolist() == [0, 0, 0, 3, 3]
    assert hist["sched"].counts.tolist() == [0, 0, 0, 1, 0]
    assert stale == []


def test_recorder_writes_once_per_period_on_the_loop():
    class CountingKV(MemoryKV):
        puts = 0
        fail = True

        async def put(self, key, value, *, skip_if_exists=False):
            CountingKV.puts += 1
            if CountingKV.fail:
                CountingKV.fail = False
                raise modal.exception.ConnectionError("blip")
            return await super().put(key, value)

    kv, clock = CountingKV(), ManualClock()
    rec = ArrivalRecorder("warmers", kv, router_id="r1", flush_s=30.0, clock=clock)
    t0 = _utc(2025, 1, 6, 12)

    async def go():
        for i in range(50):
            rec.record("pred", t0 + i * 0.1)
        await until(lambda: clock.sleeping == 1)        # one timer for the 50 arrivals
        puts = [CountingKV.puts]
        clock.advance(29.0)                             # before the period: no write
        await until(lambda: clock.sleeping == 1)
        puts.append(CountingKV.puts)
        clock.advance(1.0)                              # the write fails: a retry is timed
        await until(lambda: CountingKV.puts == 1 and clock.sleeping == 1)
        clock.advance(30.0)                             # the retry writes
        await until(lambda: CountingKV.puts == 2)
        await until(lambda: rec._timer is None)
        for _ in range(5):                              # nothing new: no timer, no write
            clock.advance(30.0)
            await asyncio.sleep(0)
        return puts, clock.sleeping

    puts, sleeping = asyncio.run(go())
    assert puts == [0, 0] and sleeping == 0
    # The first write failed and was retried; 50 arrivals cost two writes.
    assert CountingKV.puts == 2 and rec.writes == 1
    assert kv.data[rec.key("pred")] == {minute_of(t0): 50}


def test_a_cancelled_write_timer_does_not_start_another():
    """A router shutting down cancels the timer with counts unsaved: it must end there (a
    new timer would never be awaited, and shutdown would wait on it forever)."""
    kv, clock = MemoryKV(), ManualClock()
    rec = ArrivalRecorder("warmers", kv, router_id="r1", flush_s=30.0, clock=clock)

    async def go():
        rec.record("pred", _utc(2025, 1, 6, 12))
        await until(lambda: clock.sleeping == 1)
        timer = rec._timer
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
        await asyncio.sleep(0)
        return rec._timer, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    timer, others = asyncio.run(go())
    assert timer is None and others == []


def test_router_records_user_requests_only():
    arrivals: list[tuple[str, float]] = []
    fake = FakeModal()
    backend = ModalBackend(router_app, {"upper": fake.cls()}, stats=MemoryKV())
    asgi = make_asgi_app(router_app, backend, jobs=_jobs(FakeJobFunction()),
                         api_keys=ApiKeys([KEY_A]), on_arrival=lambda e, t: arrivals.append((e, t)))

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                     base_url="http://t") as c:
            codes = [
                (await c.post("/v1/upper", json={"inputs": ["a"]}, headers=AUTH_A)).status_code,
                (await c.post("/v1/upper/jobs", json={"inputs": ["a"]},
                              headers=AUTH_A)).status_code,
                (await c.post("/v1/upper", json={"inputs": ["a"]})).status_code,
                (await c.post("/v1/nope", json={"inputs": ["a"]}, headers=AUTH_A)).status_code,
                (await c.post("/v1/upper", content=b"{", headers=AUTH_A)).status_code,
            ]
            for path in ("/healthz", "/readyz", "/metrics"):
                await c.get(path)
            return codes

    assert asyncio.run(go()) == [200, 202, 401, 404, 400]
    assert [e for e, _ in arrivals] == ["upper", "upper"]
    assert all(abs(t - arrivals[0][1]) < 60 for _, t in arrivals)
