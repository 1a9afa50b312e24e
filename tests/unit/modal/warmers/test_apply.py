"""The Modal warmers offline: the generated cron functions (names, schedules, time zones),
their bodies run against a recording stand-in for ``update_autoscaler`` and in-memory
Dicts."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import types
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import modal
import pytest
from croniter import croniter
from modal._utils.async_utils import synchronizer

import floodway as fw
from floodway.core.priors import COLD_START_PRIOR_S, SERVICE_PRIOR
from floodway.modal import autoscaler
from floodway.modal.kv import MemoryKV, MemoryStore
from floodway.modal.router import units
from floodway.modal.router.backend import STATS_DICT, ModalBackend
from floodway.modal.stats import BOOT_S
from floodway.modal.warmers import apply
from floodway.modal.warmers.apply import REAPPLY_S, Stores, run_warmer
from floodway.modal.warmers.plan import TICK_NAME, WarmerSpec, warmer_plan
from floodway.warmers.target import minute_of
from tests.unit.modal.router.test_backend import FakeModal
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
