"""bench's report: a summary whose counts add up, the 200s' percentiles, the per-request
CSV, the table's rows and the PNG."""

import csv
import math

import pytest

from floodway.bench.plot import plot_bench
from floodway.bench.replay import Result
from floodway.bench.report import (
    CSV_COLUMNS,
    summarize,
    summary_rows,
    summary_table,
    write_requests_csv,
)


def _results():
    rows = [(0.0, 200, 0.1), (0.2, 200, 0.3), (0.5, 200, 1.5), (1.0, 202, 0.02),
            (1.1, 503, 0.01), (1.2, 429, 0.005), (1.3, 504, 1.0), (1.4, 0, math.nan),
            (2.5, 200, 0.2)]
    return [Result(i, t, status=s, latency_s=x, error="ConnectError" if s == 0 else "")
            for i, (t, s, x) in enumerate(rows)]


def test_summary_counts_add_up_and_percentiles_are_of_200s():
    s = summarize(_results(), deadline_s=1.0)
    assert s.counts == {"ok": 3, "late": 1, "async": 1, "429": 1, "503": 1, "504": 1,
                        "other": 1}
    assert sum(s.counts.values()) == s.requests == 9
    assert s.latency_200_s[50] == pytest.approx(0.2)
    assert s.latency_200_s[99] == pytest.approx(1.5)
    assert s.goodput.basis == "whole run" and s.goodput.good == 3
    assert s.goodput.seconds == 3 and s.goodput.per_s == pytest.approx(1.0)
    over = summarize(_results(), deadline_s=1.0, capacity_rps=4)   # second 1 has 5
    assert over.goodput.basis == "overloaded" and over.goodput.seconds == 1
    assert over.goodput.good == 0


def test_rows_name_every_outcome_and_the_goodput_basis():
    rows = dict(summary_rows(summarize(_results(), deadline_s=1.0)))
    assert rows["200 within deadline"] == "3 (33.3%)"
    assert rows["other / no answer"] == "1 (11.1%)"
    assert rows["200 latency p50 (ms)"] == "200.0"
    assert "over the whole run" in rows["goodput"]
    assert summary_table(summarize(_results(), 1.0), "t").row_count == len(rows)


def test_csv_has_a_row_per_request(tmp_path):
    s = summarize(_results(), deadline_s=1.0)
    with write_requests_csv(s, tmp_path / "r.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 9
    assert [r["outcome"] for r in rows][:3] == ["ok", "ok", "late"]
    assert rows[7]["status"] == "0" and rows[7]["latency_s"] == ""
    assert rows[7]["error"] == "ConnectError"


def test_plot_writes_a_png(tmp_path):
    s = summarize(_results(), deadline_s=1.0)
    out = plot_bench([r.send_s for r in s.results], [r.latency_s for r in s.results],
                     s.outcomes, 1.0, tmp_path / "sub" / "b.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="one length"):
        plot_bench([0.0], [], [], 1.0, tmp_path / "x.png")


def test_failures_are_reported_by_status_with_the_first_message():
    from floodway.bench.report import failures

    rs = [Result(0, 0.0, status=200, latency_s=0.1),
          *[Result(i, 0.1 * i, status=422, latency_s=0.01,
                   error=f"inputs[0]: expected an array of float32 (request {i})")
            for i in range(1, 4)],
          Result(4, 0.5, status=503, latency_s=0.01, error="over capacity"),
          Result(5, 0.6, latency_s=1.0, error="ServerDisconnectedError: Server disconnected"),
          Result(6, 0.7, status=202, latency_s=0.01)]
    got = failures(rs)
    assert [(f.kind, f.count) for f in got] == [("422", 3), ("503", 1),
                                                ("no answer (ServerDisconnectedError)", 1)]
    assert got[0].describe() == "422 x 3: inputs[0]: expected an array of float32 (request 1)"


def test_every_request_refused_with_a_4xx_fails_the_run():
    from types import SimpleNamespace

    from floodway.bench.command import _failures
    from floodway.bench.report import all_refused
    from floodway.errors import FloodwayError

    refused = [Result(i, 0.0, status=422 if i else 401, latency_s=0.01, error="bad item")
               for i in range(5)]
    assert all_refused(refused) and not all_refused([*refused, Result(9, 1.0, status=200)])
    assert not all_refused([])
    t = SimpleNamespace(endpoint="classify", inputs=SimpleNamespace(kind="text"))
    with pytest.raises(FloodwayError, match=r"every request was refused: 422 x 4: bad item; "
                                            r"401 x 1: bad item\. The endpoint classify"):
        _failures(t, refused)
    _failures(t, [*refused, Result(9, 1.0, status=200)])     # some answered: printed only


def test_reconnected_requests_are_counted_apart_from_the_outcomes():
    rs = _results()
    rs[0].reconnected = rs[1].reconnected = True
    s = summarize(rs, deadline_s=1.0)
    rows = dict(summary_rows(s))
    assert s.reconnected == 2
    assert rows["reconnected (an idle connection the server closed; sent again)"] == "2"
    assert rows["200 within deadline"] == "3 (33.3%)" and rows["other / no answer"] == \
        "1 (11.1%)"
    assert not any(k.startswith("reconnected") for k, _ in summary_rows(summarize(
        _results(), 1.0)))
