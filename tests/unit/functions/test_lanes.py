"""The endpoints an app is served as: one per lane, each with its own bounds."""

from __future__ import annotations

import floodway as fw
from floodway.functions.lanes import lane_endpoints, served_units


def app_of(route: fw.Route, warm: fw.WarmPool | None = None) -> fw.App:
    warm = warm or fw.WarmPool(min_containers=1)
    app = fw.App("t")
    app.endpoint(name="embed", route=route, warm=warm)(lambda model, texts: texts)
    app.endpoint(name="plain")(lambda model, texts: texts)
    return app


def test_each_lane_gets_its_bounds_queue_share_and_the_endpoints_defaults():
    app = app_of(fw.Route(max_queue=10, lanes=(
        fw.Lane("short", max_tokens=32, queue_share=0.2, max_containers=1),
        fw.Lane("long", min_containers=2, max_containers=3))),
        warm=fw.WarmPool(min_containers=1, max_containers=4, scaledown_window_s=30))
    short, long = lane_endpoints(app["embed"])
    assert (short.unit, long.unit) == ("embed:short", "embed:long")
    assert (short.name, short.lane) == ("embed", "short")
    assert (short.warm.min_containers, short.warm.max_containers) == (1, 1)
    assert (long.warm.min_containers, long.warm.max_containers) == (2, 3)
    assert short.warm.scaledown_window_s == long.warm.scaledown_window_s == 30
    assert (short.route.max_queue, long.route.max_queue) == (2, 8)
    assert short.route.lanes == () and short.fn is app["embed"].fn


def test_a_queue_share_never_rounds_a_lane_to_no_queue_unless_the_endpoint_has_none():
    short, _ = lane_endpoints(app_of(fw.Route(max_queue=3, lanes=(
        fw.Lane("short", max_tokens=4, queue_share=0.1), fw.Lane("long"))))["embed"])
    assert short.route.max_queue == 1
    none, _ = lane_endpoints(app_of(fw.Route(max_queue=0, lanes=(
        fw.Lane("short", max_tokens=4), fw.Lane("long"))))["embed"])
    assert none.route.max_queue == 0


def test_served_units_are_every_lane_and_every_plain_endpoint():
    app = app_of(fw.Route(lanes=(fw.Lane("short", max_tokens=4), fw.Lane("long"))))
    assert list(served_units(app)) == ["embed:short", "embed:long", "plain"]
    assert served_units(app)["plain"] is app["plain"]
