"""Request lanes on Modal, through the real modal client and the fake control plane: a laned
endpoint deploys as one class per lane with the lane's bounds, the router sends each request
to the class of its lane (a job to the lane its inputs take), and the warmers set each lane's
class."""

from __future__ import annotations

from pathlib import Path

import httpx

from floodway.modal.autoscaler import class_autoscale
from floodway.modal.deploy import deploy_and_apply
from floodway.modal.warmers.apply import modal_stores, run_warmer
from tests.modal.support import API_KEY, ROUTER_SECRET, deploy_example, embed_rows, run_async

LANES_APP = Path(__file__).with_name("lanes_app.py")
APP = "floodway-lanes"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SHORT = ["hi", "yo"]                     # a few tokens each: the short lane (16)
LONG = ["word " * 40]                    # ~50 tokens: the long lane
NOW_S = 1_704_103_200.0                  # 2024-01-01 10:00 UTC


def _calls_by_class(server) -> dict[str, list]:
    """The rows each lane class's ``predict`` was called with (one call per row)."""
    from modal._serialization import deserialize

    out: dict[str, list] = {}
    for tag in ("EmbedShort.*", "EmbedLong.*"):
        fid = server.state.function(tag, app=APP).function_id
        out[tag] = sorted(deserialize(i.input.args, None)[0][0]
                          for c in server.state.calls.values() if c.function_id == fid
                          for i in c.inputs)
    return out


def test_a_laned_endpoint_deploys_one_class_per_lane(fake_modal):
    deploy_example(fake_modal, path=LANES_APP)
    state = fake_modal.state
    assert state.class_tags(APP) == {"EmbedShort", "EmbedLong"}
    assert {"EmbedShort.*", "EmbedLong.*", "router", "run_job", "warm_tick"} <= \
        state.function_tags(APP)
    bounds = {}
    for tag in ("EmbedShort.*", "EmbedLong.*"):
        d = state.function(tag, app=APP).definition
        a = d.autoscaler_settings
        bounds[tag] = (a.min_containers, a.buffer_containers, a.max_containers)
        assert set(d.method_definitions) == {"predict"} and d.batch_max_size == 8
    # The lanes' own bounds (the long lane: the endpoint's floor); each buffer capped so
    # that floor + buffer <= the lane's max_containers.
    assert bounds == {"EmbedShort.*": (2, 0, 2), "EmbedLong.*": (1, 1, 3)}
    assert state.unimplemented == []


def test_the_router_sends_each_request_to_its_lanes_class(fake_modal, monkeypatch):
    monkeypatch.setenv("FLOODWAY_API_KEYS", API_KEY)
    mod = deploy_example(fake_modal, path=LANES_APP)
    for cls in ("EmbedShort", "EmbedLong"):
        fake_modal.handle(f"{cls}.predict", embed_rows)

    async def go() -> tuple[httpx.Response, httpx.Response, dict]:
        transport = httpx.ASGITransport(app=mod.router.local())
        async with httpx.AsyncClient(transport=transport, base_url="http://router") as c:
            short = await c.post("/v1/embed", json={"inputs": SHORT}, headers=AUTH)
            long = await c.post("/v1/embed", json={"inputs": LONG}, headers=AUTH)
            bare = (await c.get("/readyz")).json()   # detail needs a key on Modal
            ready = (await c.get("/readyz", headers=AUTH)).json()
            metrics = (await c.get("/metrics")).status_code
        assert bare == {"ready": True} and metrics == 401
        return short, long, ready

    short, long, ready = run_async(go())
    assert short.status_code == 200, short.text
    assert long.status_code == 200, long.text
    assert short.headers["x-floodway-lane"] == "short"
    assert long.headers["x-floodway-lane"] == "long"
    assert [v[0] for v in short.json()["outputs"]] == [2.0, 2.0]
    assert _calls_by_class(fake_modal) == {"EmbedShort.*": sorted(SHORT),
                                           "EmbedLong.*": LONG}
    assert set(ready["lanes"]["embed"]) == {"short", "long"}
    assert ready["lanes"]["embed"]["long"]["max_containers"] == 3


def test_a_job_runs_in_the_lane_its_inputs_take(fake_modal):
    """The generated ``run_job`` body (in-process) with the real client: a job's rows go to
    the class of the lane they take."""
    mod = deploy_example(fake_modal, path=LANES_APP)
    for cls in ("EmbedShort", "EmbedLong"):
        fake_modal.handle(f"{cls}.predict", embed_rows)

    async def go() -> tuple[list, list]:
        return (await mod.run_job.local("embed", SHORT),
                await mod.run_job.local("embed", LONG))

    short, long = run_async(go())
    assert [v[0] for v in short] == [2.0, 2.0] and [v[0] for v in long] == [200.0]
    assert _calls_by_class(fake_modal) == {"EmbedShort.*": sorted(SHORT),
                                           "EmbedLong.*": LONG}


def test_the_warmers_set_each_lanes_class(fake_modal):
    mod = deploy_example(fake_modal, path=LANES_APP)
    classes = {"embed:short": mod.EmbedShort, "embed:long": mod.EmbedLong}
    applied = run_warmer(mod.endpoints, ["embed"], autoscale=class_autoscale(classes),
                         stores=modal_stores(), now_s=NOW_S)
    assert [(a.endpoint, a.error) for a in applied] == [("embed:short", None),
                                                        ("embed:long", None)]
    state = fake_modal.state
    assert state.updates_for("EmbedShort.*") == [
        {"min_containers": 2, "buffer_containers": 0, "scaledown_window": 60}]
    assert state.updates_for("EmbedLong.*") == [
        {"min_containers": 1, "buffer_containers": 1, "scaledown_window": 60}]
    # The generated tick (its body, in-process) finds each lane's class by its unit.
    results = mod.warm_tick.local()
    assert [(r["endpoint"], r["error"]) for r in results] == [("embed:short", None),
                                                              ("embed:long", None)]


def test_floodway_deploy_reapplies_each_lanes_class(fake_modal):
    """`floodway deploy` looks each lane's class up by name in the deployed app
    (``EmbedShort``, ``EmbedLong``) and re-applies its target."""
    from tests.modal.conftest import load_modal_app

    fake_modal.state.add_secret(ROUTER_SECRET, {"FLOODWAY_API_KEYS": "k"})
    mod = load_modal_app(LANES_APP)
    applied = deploy_and_apply(mod.app, mod.endpoints, now_s=NOW_S)
    assert [(a.endpoint, a.called, a.error) for a in applied] == [
        ("embed:short", True, None), ("embed:long", True, None)]
    state = fake_modal.state
    assert state.function("EmbedShort.*", app=APP).autoscaler.min_containers == 2
    assert state.function("EmbedLong.*", app=APP).autoscaler.min_containers == 1
    assert len(state.updates_for("EmbedLong.*")) == 1
