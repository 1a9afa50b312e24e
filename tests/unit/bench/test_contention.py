"""Contention measured by a bench run: each sampling interval's busy containers read from
``floodway_containers{state="busy"}`` (summed over lanes), and the factor per busy count,
the seconds measured over the seconds the run's fit gives, written into batch_times.json
in a form the simulator reads back; and the load term, the cores the router and the client
take as requests arrive, and batch time against the share of a core they leave."""

import pytest

from floodway.bench.batches import BatchSampler, CpuNow, Interval, batch_times, fit
from floodway.bench.contention import (
    DISTURBED_CORES,
    busy_count,
    contention,
    cpu_of_readiness,
    disturbed_text,
    fitted_s,
    foreign,
    load,
)
from floodway.sim.model import CpuShare, ServiceModel


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


def _loaded(rates: list[float], cpu_per_request_s: float, at_rest: float = 0.9,
            busy: float = 2.0) -> tuple[list[Interval], list[float]]:
    """One 1 s interval per rate, each with one batch of 10 rows whose fit gives 0.07 s
    (0.02 + 10 x 0.005 s), on 2 cores: the router and the client took 0.1 cores +
    `cpu_per_request_s` per request sent (its `cpu_s`), and the batch ran 0.07 s x
    `at_rest` / the share of a core left to each of `busy` containers; and the sends at
    those rates."""
    share = CpuShare(2)
    ivs, sends = [], []
    for i, rate in enumerate(rates):
        other = 0.1 + cpu_per_request_s * rate
        ivs.append(Interval(float(i + 1), 1, 10,
                            0.07 * at_rest / share.share(other, round(busy)),
                            since_s=float(i), busy=busy, cpu_s=other))
        sends += [i + (k + 0.5) / rate for k in range(int(rate))]
    return ivs, sends


def test_the_load_term_is_the_cores_the_router_and_client_take():
    model = {"per_batch_s": 0.02, "per_row_s": 0.005}
    rates = [5, 10, 40, 80, 120, 160, 10, 5, 200, 20]
    ivs, sends = _loaded(rates, 0.003)
    got = load(ivs, model, None, sends, cores=2)
    assert got["intervals"] == 10 and got["window_s"] == 1.0 and got["cores"] == 2
    assert got["other_cores"] == pytest.approx(0.1, abs=1e-3)
    assert got["other_per_request_s"] == pytest.approx(0.003, rel=1e-3)
    assert got["at_rest"] == pytest.approx(0.9, rel=1e-3)
    # the simulator's factor gives the batch times back, slower the faster requests come
    m = ServiceModel(load=CpuShare(**{k: got[k] for k in
                                      ("cores", "other_cores", "other_per_request_s",
                                       "at_rest")}))
    for iv, rate in zip(ivs, rates, strict=True):
        assert 0.07 * m.load.factor(rate, 2) == pytest.approx(iv.seconds, rel=2e-3)
    assert m.load.factor(200, 2) > 1.4 * m.load.factor(5, 2)
    # with the busy count's factor (x1.5 for 2 busy) taken out first
    con = {"containers": 2, "by_busy": [{"busy": 2, "factor": 1.5}]}
    assert load(ivs, model, con, sends, 2)["at_rest"] == pytest.approx(0.9 / 1.5, rel=1e-3)
    # one container busy has a core whatever the router takes: at_rest is its ratio
    one, one_sends = _loaded(rates, 0.003, busy=1.0)
    assert load(one, model, None, one_sends, 2)["at_rest"] == pytest.approx(0.9, rel=1e-3)
    # less CPU the faster requests come (no such thing, but measured noise): a flat level
    flat_cpu = [iv._replace(cpu_s=0.5 - 0.001 * r) for iv, r in zip(ivs, rates, strict=True)]
    level = load(flat_cpu, model, None, sends, 2)
    assert level["other_per_request_s"] == 0.0
    assert level["other_cores"] == pytest.approx(sum(iv.cpu_s for iv in flat_cpu) / 10)
    # nothing to fit on: no sends, no cores (a router elsewhere), no CPU measured, too few
    # intervals, or rates all alike
    assert load(ivs, model, None, [], 2) is None
    assert load(ivs, model, None, sends) is None
    assert load([iv._replace(cpu_s=None) for iv in ivs], model, None, sends, 2) is None
    assert load(ivs[:5], model, None, sends, 2) is None
    flat, flat_sends = _loaded([50] * 10, 0.003)
    assert load(flat, model, None, flat_sends, 2) is None


def test_each_interval_carries_the_cpu_the_router_and_the_client_spent():
    def text(batches: int, cpu_s: float | None) -> str:
        t = _exposition(batches, 4 * batches, 0.1 * batches, {"": 1})
        return t if cpu_s is None else \
            t + f"# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total {cpu_s}\n"
    s = BatchSampler("embed")
    s.add(0.25, text(1, 10.0), cpu=CpuNow(3.0, 50.0, 1000.0))
    # 0.25 s on 2 cores: router 0.2 + client 0.05, workers 0.4, the machine 0.7 (foreign 0.05)
    s.add(0.5, text(2, 10.2), cpu=CpuNow(3.05, 50.4, 1000.7))
    s.add(0.75, text(3, 10.3), cpu=CpuNow(3.1))        # neither workers' nor machine's
    s.add(1.0, text(4, None), cpu=CpuNow(3.2))         # the router's not exported
    s.add(1.25, text(5, 10.5), cpu=CpuNow(3.3, 51.0, 1001.9))
    # the machine's reading behind the others' (sampling skew): no other work, not less
    s.add(1.5, text(6, 10.6), cpu=CpuNow(3.4, 51.4, 1002.4))
    assert [iv.cpu_s for iv in s.intervals] == [pytest.approx(x) if x else x for x in
                                               (0.25, 0.15, None, None, 0.2)]
    assert [iv.foreign_cpu_s for iv in s.intervals] == [pytest.approx(0.05), None, None,
                                                       None, pytest.approx(0.0)]
    doc = batch_times(s, cores=2)
    assert [iv.get("cpu_s") for iv in doc["intervals"]] == [0.25, 0.15, None, None, 0.2]
    assert doc["foreign"] == {"over_cores": DISTURBED_CORES, "most_cores": 0.2,
                              "mean_cores": 0.1, "disturbed_s": []}
    busy = s.intervals + [Interval(1.7502, 1, 4, 0.1, since_s=1.5, foreign_cpu_s=0.25),
                          Interval(2.0, 1, 4, 0.1, since_s=1.7502, foreign_cpu_s=0.2),
                          Interval(2.5, 1, 4, 0.1, since_s=2.25, foreign_cpu_s=0.3)]
    got = foreign(busy)
    assert got["disturbed_s"] == [[1.5, 2.0], [2.25, 2.5]] and got["most_cores"] == 1.2
    assert disturbed_text(got) == "1.5-2.0 s, 2.2-2.5 s"
    assert foreign([iv._replace(foreign_cpu_s=None) for iv in busy]) is None


def test_the_containers_cpu_is_summed_over_an_endpoints_lanes_from_readyz():
    doc = {"endpoints": {"embed": [{"state": "ready", "cpu_s": 1.5}],
                         "embed:long": [{"state": "busy", "cpu_s": 2.0}, {"state": "starting"}],
                         "other": [{"state": "ready", "cpu_s": 9.0}]}}
    assert cpu_of_readiness(doc, "embed") == 3.5
    assert cpu_of_readiness(doc, "missing") is None
    assert cpu_of_readiness({"endpoints": {"embed": [{"state": "ready"}]}}, "embed") is None
    assert cpu_of_readiness("not a document", "embed") is None
