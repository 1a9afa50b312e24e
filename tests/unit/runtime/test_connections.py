"""Connection limits read from the environment, and the open-files limit raised to fit."""

from __future__ import annotations

import resource

import pytest

from floodway.errors import FloodwayError
from floodway.runtime.connections import (
    HEADER_TIMEOUT_S,
    ConnectionLimits,
    ConnectionStats,
    limits_from_env,
    raise_fd_limit,
    uvicorn_options,
)


def test_limits_come_from_their_variables_or_the_defaults():
    assert limits_from_env({}) == ConnectionLimits()
    got = limits_from_env({"FLOODWAY_HEADER_TIMEOUT_S": "2.5", "FLOODWAY_MAX_CONNECTIONS": "64",
                           "FLOODWAY_KEEPALIVE_S": "1"})
    assert got == ConnectionLimits(header_timeout_s=2.5, keepalive_s=1.0, max_connections=64)
    assert ConnectionLimits().header_timeout_s == HEADER_TIMEOUT_S


@pytest.mark.parametrize("var,value", [("FLOODWAY_HEADER_TIMEOUT_S", "0"),
                                       ("FLOODWAY_MAX_CONNECTIONS", "2.5"),
                                       ("FLOODWAY_KEEPALIVE_S", "soon")])
def test_a_bad_value_names_its_variable(var, value):
    with pytest.raises(FloodwayError, match=var):
        limits_from_env({var: value})


def test_uvicorn_gets_the_keepalive_and_a_protocol_bound_to_the_limits():
    limits, stats = ConnectionLimits(keepalive_s=3), ConnectionStats()
    opts = uvicorn_options(limits, stats)
    assert opts["timeout_keep_alive"] == 3
    assert opts["http"].keywords == {"limits": limits, "stats": stats}
    assert stats.snapshot() == {"open": 0, "closed": {}}


def test_the_open_files_limit_is_raised_toward_the_cap_never_past_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        now = raise_fd_limit(soft)          # asks for more than the current soft limit
        assert now >= soft and (hard == resource.RLIM_INFINITY or now <= hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
