"""What the Modal router keeps per unit, offline."""

from __future__ import annotations

from floodway.modal.router.units import runner_loads


def test_runner_loads_spread_rows_evenly_in_batches():
    loads = runner_loads(3, 10, 4, 2)
    assert [c.batch_rows for c in loads] == [(4,), (3,), (3,)]
    assert [c.state for c in loads] == ["ready"] * 3
    deep = runner_loads(2, 17, 4, 2)          # 9 + 8 rows: three and two batches
    assert [c.batch_rows for c in deep] == [(4, 4, 1), (4, 4)]
    assert [c.state for c in deep] == ["busy", "busy"]
    assert runner_loads(0, 5, 4, 2) == []
