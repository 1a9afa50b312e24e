"""What the GPU classes measure of themselves on Modal, offline."""

from __future__ import annotations

import pytest

from floodway.modal.stats import record_cold_start


def test_record_cold_start_tells_restores_apart():
    class SyncDict(dict):
        def put(self, key, value):
            self[key] = value

    d = SyncDict()
    # A fresh boot: both hooks ran now, back to back -> the whole span counts.
    assert record_cold_start("e", 100.0, 108.0, 108.1, 110.0, kv=d) == pytest.approx(10.0)
    # Restored from a snapshot taken at deploy time: only the snap=False hook ran now.
    assert record_cold_start("e", 0.0, 8.0, 5000.0, 5001.5, kv=d) == pytest.approx(1.5)
    assert [s["init_s"] for s in d["cold:e"]] == [10.0, 1.5]
    assert record_cold_start("e", 0, 1, 1, 2, kv=object()) == 2   # a broken store: no raise
