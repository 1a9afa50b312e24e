"""Route.lanes: what a definition may say of its lanes, and what it is told when it is wrong."""

from __future__ import annotations

import pytest

import floodway as fw
from floodway.config_lanes import queue_shares
from floodway.errors import ConfigError


def fields(route: fw.Route) -> set[str]:
    return {p.field for p in route.problems("route")}


def test_two_lanes_with_a_bounded_first_and_an_open_last_are_fine():
    route = fw.Route(lanes=[fw.Lane("short", max_tokens=64), fw.Lane("long")])
    assert route.problems("route") == [] and isinstance(route.lanes, tuple)


@pytest.mark.parametrize(("lanes", "field"), [
    ((fw.Lane("only"),), "route.lanes"),
    ((fw.Lane("a"), fw.Lane("b")), "route.lanes[0]"),
    ((fw.Lane("a", max_rows=2), fw.Lane("b", max_tokens=9)), "route.lanes[1]"),
    ((fw.Lane("a", max_rows=2), fw.Lane("a")), "route.lanes"),
    ((fw.Lane("Short", max_rows=2), fw.Lane("b")), "route.lanes[0].name"),
    ((fw.Lane("a:b", max_rows=2), fw.Lane("b")), "route.lanes[0].name"),
    ((fw.Lane("a", max_tokens=0), fw.Lane("b")), "route.lanes[0].max_tokens"),
    ((fw.Lane("a", max_rows=1, queue_share=0.8), fw.Lane("b", queue_share=0.5)),
     "route.lanes.queue_share"),
    ((fw.Lane("a", max_rows=1, queue_share=0), fw.Lane("b")), "route.lanes[0].queue_share"),
    ((fw.Lane("a", max_rows=1, min_containers=3, max_containers=2), fw.Lane("b")),
     "route.lanes[0].min_containers"),
    (("short", "long"), "route.lanes"),
    ((fw.Lane("a", max_tokens=500), fw.Lane("b", max_tokens=64), fw.Lane("c")),
     "route.lanes[1]"),
    ((fw.Lane("a", max_tokens=64), fw.Lane("b", max_tokens=64, max_rows=2), fw.Lane("c")),
     "route.lanes[1]"),
])
def test_each_mistake_names_its_field(lanes, field):
    assert field in fields(fw.Route(lanes=lanes))


def test_the_decorator_names_the_endpoint_field_and_allowed_values():
    app = fw.App("t")
    with pytest.raises(ConfigError) as e:
        app.endpoint(route=fw.Route(lanes=(fw.Lane("a"), fw.Lane("b"))))(
            lambda model, texts: texts)
    text = str(e.value)
    assert "route.lanes[0]" in text and "max_tokens or max_rows" in text


def test_a_streaming_endpoint_takes_no_lanes_and_a_lane_floor_must_fit_its_ceiling():
    app = fw.App("t")
    lanes = (fw.Lane("short", max_tokens=8), fw.Lane("long"))

    async def gen(model, text: str):
        yield text

    with pytest.raises(ConfigError, match="route.lanes"):
        app.endpoint(route=fw.Route(lanes=lanes))(gen)
    with pytest.raises(ConfigError, match=r"route.lanes\[1\].min_containers"):
        app.endpoint(warm=fw.WarmPool(max_containers=1), route=fw.Route(
            lanes=(lanes[0], fw.Lane("long", min_containers=2))))(lambda model, t: t)


def test_queue_shares_split_what_the_set_ones_leave():
    lanes = (fw.Lane("a", max_rows=1, queue_share=0.5), fw.Lane("b", max_rows=9), fw.Lane("c"))
    assert queue_shares(lanes) == (0.5, 0.25, 0.25)
    assert queue_shares((fw.Lane("a", max_rows=1), fw.Lane("b"))) == (0.5, 0.5)


def test_tighter_lanes_first_is_fine():
    lanes = (fw.Lane("tiny", max_tokens=16, max_rows=1), fw.Lane("short", max_tokens=64),
             fw.Lane("rows", max_rows=4), fw.Lane("rest"))
    assert fw.Route(lanes=lanes).problems("route") == []
