"""Request lanes on Modal, offline: each lane of an endpoint is a Modal class of its own with
the lane's autoscaler bounds; the router sends a request to the class of the lane it takes
(a job to the lane its inputs take), reports the lanes in `/readyz` as the local pool does,
and the warmers set each lane's class."""

from __future__ import annotations

import asyncio
import json
import types

import httpx
import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.errors import FloodwayError
from floodway.http.app import make_asgi_app
from floodway.modal.contract import class_name
from floodway.modal.jobs import run_job_rows
from floodway.modal.kv import MemoryKV, MemoryStore
from floodway.modal.router.backend import ModalBackend
from floodway.modal.stats import measured_record, service_key
from floodway.modal.warmers.apply import Stores, class_backlog, run_warmer, units_of
from floodway.routers.admission import ApiKeys
from floodway.routers.lanes import lane_keys, resolve_unit
from tests.unit.modal.app.test_objects import (
    _deploy_settings,
    _run_in_module,
    _service_function,
)

KEY = "key-lanes-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
SHORT = ["hi", "yo"]                      # a few tokens: the short lane
LONG = ["word " * 60]                     # ~75 tokens: past the short lane's 16


def laned_app(tmp_path=None, *, predictive: bool = False) -> fw.App:
    app = fw.App("laned")
    model = fw.LocalModel(tmp_path) if tmp_path is not None else \
        fw.HFModel("org/m", revision="c" * 40)

    @app.endpoint(model=model, gpu="L4", build=fw.Build(max_seq_len=128),
                  warm=fw.WarmPool(min_containers=1, buffer_containers=2, max_containers=6,
                                   predictive=predictive),
                  route=fw.Route(max_queue=10, lanes=(
                      fw.Lane("short", max_tokens=16, min_containers=2, max_containers=3,
                              queue_share=0.6),
                      fw.Lane("long", min_containers=0, max_containers=4))),
                  batching=fw.Batching(max_batch_rows=4))
    def embed(model, texts: list[str]) -> list[str]:
        return [t.upper() for t in texts]

    return app


# ---------------------------------------------------------------- the classes

def test_a_lane_class_is_named_after_its_unit():
    assert class_name("embed:short") == "EmbedShort"
    assert class_name("big-model_v2:long_ones") == "BigModelV2LongOnes"
    assert class_name("embed") == "Embed"


def test_a_laned_endpoint_deploys_as_one_class_per_lane_with_its_bounds(tmp_path, monkeypatch):
    module = _run_in_module(tmp_path, "fw_deploy_lanes", laned_app(tmp_path), monkeypatch)
    assert not hasattr(module, "Embed")
    auto = {name: _deploy_settings(_service_function(getattr(module, name)))
            ["autoscaler_settings"] for name in ("EmbedShort", "EmbedLong")}
    got = {name: (a.min_containers, a.max_containers, a.buffer_containers)
           for name, a in auto.items()}
    # The lanes' own bounds; the buffer (2) capped so that floor + buffer <= the lane's cap.
    assert got == {"EmbedShort": (2, 3, 1), "EmbedLong": (0, 4, 2)}
    for name in ("EmbedShort", "EmbedLong"):
        info = _service_function(getattr(module, name)).info()
        assert info.gpus == [("L4", 1)] and info.batching_info.max_batch_size == 4
    # A lane keeps a GPU warm: so is the router.
    assert _deploy_settings(module.router)["autoscaler_settings"].min_containers == 1


def test_a_lane_and_an_endpoint_that_share_a_class_name_are_refused(tmp_path, monkeypatch):
    app = laned_app(tmp_path)
    app.endpoint(model=fw.LocalModel(tmp_path), name="embed_short")(lambda model, x: x)
    with pytest.raises(FloodwayError, match="'embed:short' and 'embed_short' would both "
                                            "become Modal class 'EmbedShort'"):
        _run_in_module(tmp_path, "fw_deploy_lane_clash", app, monkeypatch)


# ---------------------------------------------------------------- the router

class LaneClasses:
    """A recording stand-in for the lanes' Modal classes: ``classes[unit]()`` has
    ``predict.remote.aio(row)`` (records (unit, row), answers the row upper-cased) and
    ``predict.get_current_stats.aio()`` (answers `stats[unit]`)."""

    def __init__(self, units=("embed:short", "embed:long")):
        self.sent: list[tuple[str, str]] = []
        self.stats = {u: types.SimpleNamespace(backlog=0, num_total_runners=1) for u in units}
        self.classes = {u: self._cls(u) for u in units}

    def _cls(self, unit: str):
        async def remote(row):
            self.sent.append((unit, row))
            await asyncio.sleep(0)
            return row.upper()

        async def stats():
            return self.stats[unit]

        predict = types.SimpleNamespace(remote=types.SimpleNamespace(aio=remote),
                                        get_current_stats=types.SimpleNamespace(aio=stats))
        return lambda: types.SimpleNamespace(predict=predict)

    def units(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for unit, row in self.sent:
            out.setdefault(unit, set()).add(row)
        return out


def test_each_request_goes_to_the_class_of_its_lane():
    app, fake, clock = laned_app(), LaneClasses(), ManualClock(monotonic_s=1000.0)
    # The clock stands still: the stats read first stay fresh, no refresh in between.
    backend = ModalBackend(app, fake.classes, stats=MemoryKV(), clock=clock)
    arrivals: list[str] = []
    asgi = make_asgi_app(app, backend, api_keys=ApiKeys([KEY]), clock=clock,
                         on_arrival=lambda unit, t: arrivals.append(unit))
    fake.stats["embed:short"] = types.SimpleNamespace(backlog=0, num_total_runners=2)
    fake.stats["embed:long"] = types.SimpleNamespace(backlog=2, num_total_runners=3)

    async def go():
        await backend.refresh("embed:short")
        await backend.refresh("embed:long")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                     base_url="http://t") as c:
            short = await c.post("/v1/embed", content=json.dumps({"inputs": SHORT}),
                                 headers=AUTH)
            long = await c.post("/v1/embed", content=json.dumps({"inputs": LONG}), headers=AUTH)
            ready = (await c.get("/readyz")).json()
            metrics = (await c.get("/metrics")).text
        return short, long, ready, metrics

    short, long, ready, metrics = asyncio.run(go())
    assert short.status_code == 200 and short.json() == {"outputs": ["HI", "YO"]}
    assert short.headers["x-floodway-lane"] == "short"
    assert long.status_code == 200 and long.headers["x-floodway-lane"] == "long"
    assert fake.units() == {"embed:short": set(SHORT), "embed:long": set(LONG)}
    assert arrivals == ["embed:short", "embed:long"]
    # Each class has its own state: the long lane's stats never show in the short one's.
    assert ready["modal"]["embed:long"]["runners"] == 3
    assert ready["modal"]["embed:short"]["backlog"] == 0
    assert ready["lanes"]["embed"]["short"] == {
        "unit": "embed:short", "max_tokens": 16, "max_rows": None, "min_containers": 2,
        "max_containers": 3, "max_queue": 6, "live_containers": 2, "queued": 0}
    assert ready["lanes"]["embed"]["long"]["live_containers"] == 3
    assert ready["lanes"]["embed"]["long"]["queued"] == 2
    assert 'floodway_queue_depth{endpoint="embed",lane="long"} 2.0' in metrics


def test_a_lanes_snapshot_and_cold_starts_are_its_own_class():
    app, fake = laned_app(), LaneClasses()
    backend = ModalBackend(app, fake.classes, stats=MemoryKV())
    fake.stats["embed:short"] = types.SimpleNamespace(backlog=2, num_total_runners=3)

    asyncio.run(backend.refresh("embed:short"))
    # Outside an event loop: no background refresh of the long lane's stats starts.
    short, long = backend.snapshot("embed:short"), backend.snapshot("embed:long")
    assert (len(short.containers), short.queued_rows, short.max_containers) == (3, 2, 3)
    # No stats read for the long lane yet: its own min_containers (0) stand in.
    assert (len(long.containers), long.queued_rows, long.max_containers) == (0, 0, 4)
    assert (short.max_queue, long.max_queue) == (6, 4)
    # A cold start asked for counts in its lane's class only, up to the lane's cap.
    assert backend.start_cold("embed:short") is False          # 3 runners: at the cap
    assert backend.start_cold("embed:long") is True
    assert len(backend.snapshot("embed:long").containers) == 1


def test_a_plain_name_resolves_to_a_lane_as_the_local_pool_resolves_it():
    ep = laned_app()["embed"]
    keys = {"embed:short": 1, "embed:long": 2, "other": 3}
    assert lane_keys(keys, "embed") == ["embed:short", "embed:long"]
    assert resolve_unit(keys, "embed", SHORT, ep) == "embed:short"
    assert resolve_unit(keys, "embed", LONG, ep) == "embed:long"
    assert resolve_unit(keys, "embed") == "embed:long"          # no inputs: the last lane
    assert resolve_unit(keys, "embed:short", LONG, ep) == "embed:short"   # a unit: itself
    assert resolve_unit({"embed:long": 2}, "embed", SHORT, ep) == "embed:long"
    assert resolve_unit(keys, "other") == "other"
    assert resolve_unit(keys, "nope", SHORT) is None


def test_a_job_runs_in_the_lane_its_inputs_take():
    app, fake = laned_app(), LaneClasses()
    backend = ModalBackend(app, fake.classes, stats=MemoryKV())

    async def go():
        return (await run_job_rows(backend, "embed", SHORT),
                await run_job_rows(backend, "embed", LONG))

    short, long = asyncio.run(go())
    assert short == ["HI", "YO"] and long == [LONG[0].upper()]
    assert fake.units() == {"embed:short": set(SHORT), "embed:long": set(LONG)}


def test_each_lane_publishes_its_own_batch_time():
    app, fake = laned_app(), LaneClasses()
    kv = MemoryKV()
    backend = ModalBackend(app, fake.classes, stats=kv)

    async def go():
        await backend.run("embed", SHORT, timeout_s=5)
        await backend.refresh("embed:short")
        await backend.refresh("embed:long")
        return await kv.get(service_key("embed:short")), await kv.get(service_key("embed:long"))

    short, long = asyncio.run(go())
    assert short is not None and short["samples"] == 1
    assert long is None                                  # no request took the long lane
    unit = backend._units["embed:long"]
    assert measured_record(unit, backend._eps["embed:long"], False)[0] == "service:embed:long"


# ---------------------------------------------------------------- the warmers

def test_the_warmers_set_each_lanes_class_to_its_bounds():
    app, calls = laned_app(), []
    stores = Stores(warm=MemoryStore(), traffic=MemoryStore(), stats=MemoryStore())
    applied = run_warmer(app, ["embed"], autoscale=lambda unit, s: calls.append((unit, s)),
                         stores=stores, now_s=1_700_000_000.0)
    assert [a.error for a in applied] == [None, None]
    assert calls == [
        ("embed:short", {"min_containers": 2, "buffer_containers": 1, "scaledown_window": 60}),
        ("embed:long", {"min_containers": 0, "buffer_containers": 2, "scaledown_window": 60})]
    assert set(stores.warm.data) >= {("applied", "laned", "embed:short"),
                                            ("applied", "laned", "embed:long")}


def _floors(app: fw.App, traffic: dict, backlog=None) -> tuple[int, int]:
    """The floors the warmer sets on (EmbedShort, EmbedLong) at `NOW_S`."""
    stores = Stores(warm=MemoryStore(), traffic=MemoryStore(traffic), stats=MemoryStore())
    calls: dict[str, dict] = {}
    applied = run_warmer(app, ["embed"], autoscale=lambda u, s: calls.__setitem__(u, s),
                         stores=stores, now_s=NOW_S, backlog=backlog)
    assert [a.error for a in applied] == [None, None]
    return calls["embed:short"]["min_containers"], calls["embed:long"]["min_containers"]


NOW_S = 1_700_000_000.0


def _busy(unit: str) -> dict:
    """The traffic Dict with a router's heavy recent arrivals in `unit`."""
    minute = int(NOW_S // 60)
    return {("arrivals", "laned", unit, "r1"): {m: 600 for m in range(minute - 30, minute + 1)}}


def test_a_predictive_lane_reads_its_own_traffic_and_backlog():
    app = laned_app(predictive=True)
    assert _floors(app, {}) == (2, 0)                 # the lanes' floors: 2 and 0
    assert _floors(app, _busy("embed:long")) == (2, 1)
    assert _floors(app, _busy("embed:short")) == (2, 0)   # not the long lane's traffic
    fake = LaneClasses()
    fake.stats["embed:long"] = types.SimpleNamespace(backlog=40, num_total_runners=0)
    assert _floors(app, {}, backlog=_sync_backlog(fake))[1] >= 1
    assert [u.unit for u in units_of(app, ["embed", "embed:long", "nope"])] == \
        ["embed:short", "embed:long"]


def _sync_backlog(fake: LaneClasses):
    """`class_backlog` over classes whose stats answer synchronously, as Modal's do there."""
    classes = {u: (lambda u=u: types.SimpleNamespace(predict=types.SimpleNamespace(
        get_current_stats=lambda: fake.stats[u]))) for u in fake.classes}
    return class_backlog(classes)
