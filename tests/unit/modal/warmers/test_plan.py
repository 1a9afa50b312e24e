"""Which warmer functions an app gets on Modal, and when they fire, offline."""

from __future__ import annotations

import floodway as fw
from floodway.modal.warmers.plan import TICK_NAME, WarmerSpec, warmer_plan
from tests.unit.modal.warmers.test_apply import _app, _next_fire, _utc


def test_plan_shares_cron_expressions_and_ticks_for_predictive(tmp_path):
    plan = warmer_plan(_app(tmp_path))
    # 09:00 minus lead 60 s minus the 30 s cold-start prior, rounded out: 08:58 New York.
    assert plan == [
        WarmerSpec("warm_cron_0", "58 8 * * 1-5", "America/New_York", ("sched", "twin"),
                   ("sched:start", "twin:start")),
        WarmerSpec("warm_cron_1", "0 10 * * 1-5", "America/New_York", ("sched", "twin"),
                   ("sched:end", "twin:end")),
        WarmerSpec(TICK_NAME, "* * * * *", "UTC", ("pred",)),
    ]


def test_plan_falls_back_to_the_tick(tmp_path):
    plan = warmer_plan(_app(tmp_path), max_window_crons=1)
    assert plan == [WarmerSpec(TICK_NAME, "* * * * *", "UTC", ("sched", "twin", "pred"))]
    # The first of the month at 00:00 minus the lead crosses into an unknown day of month.
    app = fw.App("monthly")
    app.endpoint(model=fw.LocalModel(tmp_path), name="monthly", warm=fw.WarmPool(windows=[
        fw.Window(cron="0 0 1 * *", duration_s=600, min_containers=2)]))(lambda m, x: x)
    assert warmer_plan(app) == [WarmerSpec(TICK_NAME, "* * * * *", "UTC", ("monthly",))]


def test_no_warmers_without_windows_or_prediction(tmp_path):
    app = fw.App("static")
    app.endpoint(model=fw.LocalModel(tmp_path), name="fixed",
                 warm=fw.WarmPool(min_containers=2))(lambda m, x: x)
    assert warmer_plan(app) == []


def test_summer_time_moves_the_utc_instant(tmp_path):
    start_spec = warmer_plan(_app(tmp_path))[0]
    assert _next_fire(start_spec, _utc(2025, 7, 6, 12)) == _utc(2025, 7, 7, 12, 58)   # EDT
