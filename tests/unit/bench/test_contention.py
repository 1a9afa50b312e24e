"""Contention measured by a bench run: each sampling interval's busy containers read from
``floodway_containers{state="busy"}`` (summed over lanes), and the factor per busy count,
the seconds measured over the seconds the run's fit gives, written into batch_times.json
in a form the simulator reads back; and the load term, batch time against the rate the
client sent requests at."""

import pytest

from floodway.bench.batches import BatchSampler, Interval, batch_times, fit
from floodway.bench.contention import busy_count, contention, fitted_s, load
from floodway.sim.model import ServiceModel


def _exposition(batches: int, rows: int, seconds: float, busy: dict[str, int]) -> str:
    """/metrics text of an endpoint served as two lanes, `busy` containers per lane."""
    lines = ["# TYPE floodway_batch_rows histogram",
             f'floodway_batch_rows_count{{endpoint="embed"}} {batches}',
             f'floodway_batch_rows_sum{{endpoint="embed"}} {rows}',
             "# TYPE floodway_batch_seconds histogram",
             f'floodway_batch_seconds_count{{endpoint="embed"}} {batches}',
             f'floodway_batch_seconds_sum{{endpoint="embed"}} {seconds}',
             "# TYPE floodway_containers gauge"]
    for lane, n in busy.items():
        lines += [f'floodway_containers{{endpoint="embed",lane="{lane}",state="busy"}} {n}',
                  f'floodway_containers{{endpoint="embed",lane="{lane}",state="ready"}} '
                  f'{1 - n}']
    return "\n".join(lines) + "\n"


def test_busy_containers_are_summed_over_lanes_and_averaged_over_an_interval():
    s = BatchSampler("embed")
    s.add(0.25, _exposition(1, 4, 0.1, {"short": 0, "long": 0}))
    s.add(0.5, _exposition(2, 8, 0.2, {"short": 1, "long": 1}))    # 2 busy at its end
    s.add(0.75, _exposition(3, 12, 0.3, {"short": 1, "long": 0}))
    assert [iv.busy for iv in s.intervals] == [1.0, 1.5]
    assert s.most_live == 2
    # rounded half up, at least 1 (a batch ran), at most the containers
    assert [busy_count(iv, 2) for iv in s.intervals] == [1, 2]
    assert busy_count(Interval(1.0, 1, 1, 0.1, busy=0.0), 2) == 1
    assert busy_count(Interval(1.0, 1, 1, 0.1, busy=3.0), 2) == 2
    assert busy_count(Interval(1.0, 1, 1, 0.1), 2) is None


def test_factor_is_measured_over_fitted_seconds_per_busy_count():
    model = {"per_batch_s": 0.01, "per_row_s": 0.03, "per_token_s": 0.0}
    # One container busy: batches take the line's time x 0.8; two: x 1.5.
    ivs = [Interval(float(i), 1, r, 0.8 * (0.01 + 0.03 * r), busy=1.0) for i, r in
           enumerate((2, 4, 8))]
    ivs += [Interval(10.0 + i, 2, r, 1.5 * (0.02 + 0.03 * r), busy=b) for i, (r, b) in
            enumerate(((6, 2.0), (10, 1.5), (12, 2.0)))]
    assert fitted_s(ivs[0], model) == pytest.approx(0.07)
    got = contention(ivs, model, 2)
    assert got["containers"] == 2
    assert [(c["busy"], c["intervals"], c["batches"], c["rows"]) for c in got["by_busy"]] \
        == [(1, 3, 3, 14), (2, 3, 6, 28)]
    assert [c["factor"] for c in got["by_busy"]] == pytest.approx([0.8, 1.5])
    # no gauge, or no fit: nothing to write
    assert contention([iv._replace(busy=None) for iv in ivs], model, 2) is None
    assert contention(ivs, None, 2) is None


def test_batch_times_carry_the_factors_and_the_simulator_reads_them():
    s = BatchSampler("embed")
    total = [0, 0, 0.0]
    # Quiet stretch (one busy): 40 ms a row; then both busy: 80 ms a row.
    for i, (rows, per_row, busy) in enumerate([(4, 0.04, 1), (6, 0.04, 1), (5, 0.04, 1),
                                               (8, 0.08, 2), (7, 0.08, 2), (9, 0.08, 2)]):
        total = [total[0] + 1, total[1] + rows, total[2] + rows * per_row]
        s.add(0.25 * (i + 1), _exposition(total[0], total[1], round(total[2], 6),
                                          {"": busy}))
    doc = batch_times(s)
    assert doc["fit"] == fit(s.intervals)
    assert [iv["busy"] for iv in doc["intervals"]] == [1.0, 1.0, 1.5, 2.0, 2.0]
    by = {c["busy"]: c["factor"] for c in doc["contention"]["by_busy"]}
    assert set(by) == {1, 2} and by[2] > 1.3 * by[1]
    model = ServiceModel.from_batch_times(doc)
    assert model.contention == pytest.approx((by[1], by[2])) and not model.plain
    assert model.factor(2) / model.factor(1) == pytest.approx(by[2] / by[1])


def _loaded(rates: list[float], slow_per_rps: float) -> tuple[list[Interval], list[float]]:
    """One 1 s interval per rate, each with one batch of 10 rows that ran the fit's time
    (0.02 + 10 x 0.005 s) x (1 + slow_per_rps x its rate), and the sends at those rates."""
    ivs, sends = [], []
    for i, rate in enumerate(rates):
        ivs.append(Interval(float(i + 1), 1, 10, 0.07 * (1 + slow_per_rps * rate),
                            since_s=float(i), busy=1.0))
        sends += [i + (k + 0.5) / rate for k in range(int(rate))]
    return ivs, sends


def test_the_load_term_is_batch_time_against_the_arrival_rate():
    model = {"per_batch_s": 0.02, "per_row_s": 0.005}
    rates = [5, 10, 40, 80, 120, 160, 10, 5, 200, 20]
    ivs, sends = _loaded(rates, 0.002)
    got = load(ivs, model, None, sends)
    assert got["intervals"] == 10 and got["window_s"] == 1.0
    assert got["at_rest"] == pytest.approx(1.0, abs=1e-3)
    assert got["per_rps"] == pytest.approx(0.002, rel=1e-3)
    # with the busy count's factor (x1.5 for 1 busy) taken out first
    con = {"containers": 1, "by_busy": [{"busy": 1, "factor": 1.5}]}
    assert load(ivs, model, con, sends)["at_rest"] == pytest.approx(1 / 1.5, rel=1e-3)
    # faster when busier (a fit with a negative slope): no load term, the mean ratio
    ivs_fast, sends_fast = _loaded(rates, -0.001)
    none = load(ivs_fast, model, None, sends_fast)
    assert none["per_rps"] == 0.0 and 0.8 < none["at_rest"] < 1.0
    # nothing to fit on: no sends, too few intervals, or rates all alike
    assert load(ivs, model, None, []) is None
    assert load(ivs[:5], model, None, sends) is None
    flat, flat_sends = _loaded([50] * 10, 0.002)
    assert load(flat, model, None, flat_sends) is None
    doc_model = ServiceModel(load=(got["at_rest"], got["per_rps"]))
    assert doc_model.load_factor(100) == pytest.approx(1.2, rel=1e-3)
