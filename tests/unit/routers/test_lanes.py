"""Which lane a request takes: its estimated tokens summed and its rows, first lane it fits."""

from __future__ import annotations

import floodway as fw
from floodway.routers.lanes import lane_of, request_cost, split_unit, unit_key, unit_of

LANES = (fw.Lane("tiny", max_rows=1, max_tokens=8), fw.Lane("short", max_tokens=64),
         fw.Lane("long"))


def endpoint(lanes=LANES, input_type=str):
    app = fw.App("t")

    @app.endpoint(route=fw.Route(lanes=lanes), build=fw.Build(max_seq_len=128))
    def embed(model, texts: list[str]) -> list[str]:
        return texts

    return app["embed"]


def test_cost_sums_estimated_tokens_each_capped_at_max_seq_len():
    ep = endpoint()
    # "abcd" x 3 -> 3 tokens + 2 specials; 4000 bytes -> 1002, capped at 128.
    assert request_cost(ep, ["abcdabcdabcd"]) == (5, 1)
    assert request_cost(ep, ["abcdabcdabcd", "x" * 4000]) == (5 + 128, 2)


def test_the_first_lane_a_request_fits_takes_it():
    ep = endpoint()
    assert lane_of(ep, ["hi"]).name == "tiny"
    assert lane_of(ep, ["hi", "there"]).name == "short"      # two rows: past tiny's max_rows
    assert lane_of(ep, ["word " * 30]).name == "short"        # 38 + 2 tokens
    assert lane_of(ep, ["word " * 60]).name == "long"         # 75 + 2 tokens
    assert lane_of(ep, ["hi"] * 40).name == "long"            # 40 x 3 tokens


def test_units_are_keyed_by_endpoint_and_lane_and_split_back():
    ep = endpoint()
    assert unit_of(ep, ["hi"]) == "embed:tiny" == unit_key("embed", "tiny")
    assert split_unit("embed:tiny") == ("embed", "tiny")
    assert split_unit("embed") == ("embed", None) and unit_key("embed", None) == "embed"
    plain = endpoint(lanes=())
    assert lane_of(plain, ["hi"]) is None and unit_of(plain, ["hi"]) == "embed"
