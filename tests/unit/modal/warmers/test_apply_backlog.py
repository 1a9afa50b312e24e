"""The Modal warmers count a job backlog as demand: the rows waiting in the endpoint's
class queue (where `run_job` sends a job's rows), read from its stats, raise the floor up to
max_containers. No Modal: stand-in classes and in-memory stores."""

from __future__ import annotations

from types import SimpleNamespace

from floodway.modal.stats import cold_key, service_key
from floodway.modal.warmers.apply import class_backlog, run_warmer
from tests.unit.modal.warmers.test_apply import Recorder, _app, _stores, _utc

NOW = _utc(2025, 1, 6, 20, 0)   # outside every window of the test app


def _measured_stats(ep: str) -> dict:
    # Cold starts of 7 s (BOOT_S 5 s + 2 s) and 32-row batches of 0.32 s, 2 rows per
    # request: a container drains 100 rows/s.
    return {cold_key(ep): [{"init_s": 2.0, "at": 0.0}],
            service_key(ep): {"batch_s": 0.32, "batch_rows": 32,
                              "rows_per_request": 2.0, "samples": 10}}


class _Method:
    def __init__(self, backlog):
        self.backlog = backlog

    def get_current_stats(self):
        if isinstance(self.backlog, Exception):
            raise self.backlog
        return SimpleNamespace(backlog=self.backlog, num_total_runners=1)


def _classes(ep: str, backlog) -> dict:
    method = _Method(backlog)
    return {ep: lambda: SimpleNamespace(predict=method, stream=None)}


def test_a_backlog_in_the_class_queue_raises_the_floor_up_to_max_containers(tmp_path):
    app = _app(tmp_path)
    out = {}
    for ep, rows in (("plain", 0), ("plain", 1_000), ("sched", 1_000_000)):
        [applied] = run_warmer(app, [ep], autoscale=Recorder(),
                               stores=_stores(stats=_measured_stats(ep)), now_s=NOW,
                               backlog=class_backlog(_classes(ep, rows)))
        out[rows] = (applied.settings["min_containers"], applied.reason)
    assert out[0][0] == 0 and "backlog" not in out[0][1]
    # 1,000 rows = 10 s of one container's work; drained within a 7 s cold start: 2.
    assert out[1_000][0] == 2 and "backlog of 500 queued" in out[1_000][1]
    assert out[1_000_000][0] == 5    # sched's max_containers


def test_a_backlog_that_cannot_be_read_counts_as_none(tmp_path):
    app = _app(tmp_path)
    [applied] = run_warmer(app, ["plain"], autoscale=Recorder(),
                           stores=_stores(stats=_measured_stats("plain")), now_s=NOW,
                           backlog=class_backlog(_classes("plain", ConnectionError("down"))))
    assert applied.error is None and applied.settings["min_containers"] == 0
