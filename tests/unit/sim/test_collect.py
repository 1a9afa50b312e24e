"""Collecting a run: the bulk segments' busy intervals spliced among the event loop's."""

from __future__ import annotations

import numpy as np

from floodway.sim.collect import splice_busy


def test_segments_go_before_the_listed_interval_they_preceded() -> None:
    a, b = splice_busy([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], np.array([0, 2, 3]),
                       np.array([1, 2, 1]), np.array([0.1, 2.1, 2.2, 9.0]),
                       np.array([0.2, 2.15, 2.3, 9.5]))
    assert a.tolist() == [0.1, 1.0, 2.0, 2.1, 2.2, 3.0, 9.0]
    assert b.tolist() == [0.2, 1.5, 2.5, 2.15, 2.3, 3.5, 9.5]
    a, b = splice_busy([1.0], [2.0], np.zeros(0, np.int64), np.zeros(0, np.int64),
                       np.zeros(0), np.zeros(0))
    assert a.tolist() == [1.0] and b.tolist() == [2.0]
