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
