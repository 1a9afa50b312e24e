"""Traces: per-minute counts expanded into arrivals, and bad CSVs refused naming the fault."""

from __future__ import annotations

import re

import numpy as np
import pytest

from floodway.errors import FloodwayError
from floodway.sim import Trace, read_trace


def test_trace_expansion() -> None:
    tr = Trace.from_counts([2, 0, 1], start_minute=10)
    assert tr.times_s.tolist() == [615.0, 645.0, 750.0] and tr.end_s == 780.0
    p = Trace.from_counts([5, 5], spread="poisson", seed=7)
    assert p.requests == 10 and np.all(np.diff(p.times_s) >= 0)
    assert np.all((p.times_s[:5] < 60) & (p.times_s[5:] >= 60))


BAD_TRACES = {
    "blank": ("TIMESTAMP,x\n1,2\n,3\n", "timestamp in data row 2 is blank"),
    "mixed": ("TIMESTAMP\n2023-11-16 18:17:03\n5\n", "timestamps mix numbers"),
    "nan": ("TIMESTAMP\nnan\n", "arrival 1 is nan"),
    "inf": ("TIMESTAMP\n0\ninf\n", "is inf"),
    "short row": ("x,TIMESTAMP\n5\n", "line 2: 1 fields, no 'TIMESTAMP'"),
    "span": ("TIMESTAMP\n1\n1e9\n", "are its timestamps all in one unit"),
    "count x": ("HashFunction,minute_1\nabc,x\n", "minute_1: 'x' is not a count"),
    "count huge": ("HashFunction,minute_1\nabc,1e30\n", "'1e30' is not a count"),
    "count fraction": ("HashFunction,minute_1\nabc,1.7\n", "'1.7' is not a count"),
    "counts short": ("HashFunction,minute_1,minute_2\nabc,1\n", "has 2 fields, the header 3"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_a_bad_trace_is_refused_naming_what_is_wrong(tmp_path, case) -> None:
    text, needle = BAD_TRACES[case]
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(FloodwayError, match=re.escape(needle)):
        read_trace(path)
    path.write_bytes(b"TIMESTAMP\n\xff\xfe\n")
    with pytest.raises(FloodwayError, match="not UTF-8"):
        read_trace(path)
