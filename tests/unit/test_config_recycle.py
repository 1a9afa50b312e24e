"""fw.Recycle: what a definition may say of recycling, and what it is told when it is wrong."""

from __future__ import annotations

import pytest

import floodway as fw
from floodway.config_recycle import MAX_RSS_MIB, MIN_RSS_MIB
from floodway.errors import ConfigError


def fields(r: fw.Recycle) -> set[str]:
    return {p.field for p in r.problems("recycle")}


def test_either_limit_or_both_are_fine_and_the_config_is_frozen():
    for r in (fw.Recycle(max_rss_mib=2048), fw.Recycle(max_requests=1000),
              fw.Recycle(max_rss_mib=MIN_RSS_MIB, max_requests=1)):
        assert r.problems("recycle") == []
    r = fw.Recycle(max_rss_mib=512.5)
    with pytest.raises(AttributeError):
        r.max_rss_mib = 1.0  # type: ignore[misc]
    assert fw.Recycle is fw.config.Recycle


@pytest.mark.parametrize(("recycle", "field"), [
    (fw.Recycle(), "recycle"),
    (fw.Recycle(max_rss_mib=MIN_RSS_MIB - 1), "recycle.max_rss_mib"),
    (fw.Recycle(max_rss_mib=MAX_RSS_MIB * 2), "recycle.max_rss_mib"),
    (fw.Recycle(max_rss_mib=float("nan")), "recycle.max_rss_mib"),
    (fw.Recycle(max_rss_mib="1G"), "recycle.max_rss_mib"),  # type: ignore[arg-type]
    (fw.Recycle(max_requests=0), "recycle.max_requests"),
    (fw.Recycle(max_requests=2.5), "recycle.max_requests"),  # type: ignore[arg-type]
    (fw.Recycle(max_requests=True), "recycle.max_requests"),  # type: ignore[arg-type]
])
def test_each_mistake_names_its_field(recycle, field):
    assert fields(recycle) == {field}


def test_the_decorator_keeps_it_and_names_endpoint_field_value_and_range():
    app = fw.App("t")
    ep = app.endpoint(name="ok", recycle=fw.Recycle(max_rss_mib=1024, max_requests=50))(
        lambda model, texts: texts)
    assert ep.recycle == fw.Recycle(max_rss_mib=1024, max_requests=50)
    assert app.endpoint(name="plain")(lambda model, texts: texts).recycle is None
    with pytest.raises(ConfigError) as e:
        app.endpoint(name="leaky", recycle=fw.Recycle(max_rss_mib=8, max_requests=0))(
            lambda model, texts: texts)
    text = str(e.value)
    assert "'leaky'" in text and "recycle.max_rss_mib" in text and "8" in text
    assert f"[{MIN_RSS_MIB:g}, {MAX_RSS_MIB:g}]" in text
    assert "recycle.max_requests" in text and "[1, " in text
    with pytest.raises(ConfigError, match=r"recycle.*fw\.Recycle"):
        app.endpoint(name="wrong", recycle={"max_rss_mib": 100})(  # type: ignore[arg-type]
            lambda model, texts: texts)


def test_each_lane_of_an_endpoint_recycles_alike():
    from floodway.functions.lanes import served_units

    app = fw.App("t")
    app.endpoint(name="embed", recycle=fw.Recycle(max_requests=10),
                 route=fw.Route(lanes=(fw.Lane("short", max_rows=1), fw.Lane("long"))))(
        lambda model, texts: texts)
    units = served_units(app)
    assert set(units) == {"embed:short", "embed:long"}
    assert all(u.recycle == fw.Recycle(max_requests=10) for u in units.values())
