"""The precision stage's cache key holds the reduced-precision recipe and default tolerances
of what a build asks for, so a store made by an older recipe is built again; a float32-only
build's key does not move."""

from __future__ import annotations

import floodway as fw
from floodway.build import precision as P


def test_an_int8_build_keys_its_recipe_and_tolerances_a_float32_one_nothing():
    assert P.recipe_key(fw.Build()) == ()
    (key,) = P.recipe_key(fw.Build(precision=("fp32", "int8")))
    assert key[0] == "int8" and key[2] == P.INT8_RECIPE
    assert dict(key[1])["cosine"] == P.DEFAULTS["int8"]["cosine"] == 0.99
    assert str(P.SMOOTH_ALPHA) in P.INT8_RECIPE
