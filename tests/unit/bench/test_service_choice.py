"""The service model simulate runs, and the line naming it: the options' when given, else
the batch times of the last bench run of the same app and endpoint (bench's default
--out), else the prior; never silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from floodway.bench.runfile import BenchRun, write_run
from floodway.bench.service_choice import LAST_RUN_DIR, choose_service, describe
from floodway.core.priors import SERVICE_PRIOR
from floodway.errors import FloodwayError
from floodway.routers.decide import ServiceTime
from floodway.sim.model import BATCH_TIMES_FORMAT, ServiceModel

FIT = {"per_batch_s": 0.3, "per_row_s": 0.04, "per_token_s": 2e-6, "intervals": 57}


def _bench_run(folder: Path, app: str, endpoint: str = "embed", batches: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_run(folder / "run.json", app=app, app_resolved=str(Path(app).resolve()), url=None,
              endpoint=endpoint, trace="t.csv", time_scale=1.0, deadline_ms=2000.0,
              requests=10, inputs={"kind": "text"})
    if batches:
        (folder / "batch_times.json").write_text(json.dumps({
            "format": BATCH_TIMES_FORMAT, "endpoint": endpoint, "by_rows": [], "fit": FIT}))
    return folder


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A current directory with the app file in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text("")
    return tmp_path


def test_without_options_or_a_run_it_is_the_prior_and_says_so(here):
    c = choose_service(None, "app.py", "embed")
    assert c.source == "prior" and c.model.fit == SERVICE_PRIOR
    assert c.said.startswith("service model: the prior, 20.0 ms + 5.00 ms/row (no "
                             "--batch-times, --bench-run or --service-ms")
    assert f"no bench run in {LAST_RUN_DIR}/" in c.said


def test_the_last_bench_run_of_the_endpoint_gives_the_model(here):
    _bench_run(here / LAST_RUN_DIR, "app.py")
    c = choose_service(None, "app.py::embed", "embed")
    assert c.source == "last bench run"
    assert c.model.fit == ServiceTime(0.04, 0.3, 2e-6)
    assert "the last bench run of embed, bench-out/batch_times.json (fit 300.0 ms + 40.00 " \
           "ms/row + 2.00 us/padded token" in c.said
    # the same app given by its absolute path
    assert choose_service(None, str(here / "app.py"), "embed").source == "last bench run"


@pytest.mark.parametrize("app, endpoint, batches, why", [
    ("other.py", "embed", True, "measured other.py, endpoint embed"),
    ("app.py", "rerank", True, "measured app.py, endpoint rerank"),
    ("app.py", "embed", False, "saw no batches"),
])
def test_a_run_of_something_else_is_not_used(here, app, endpoint, batches, why):
    (here / "other.py").write_text("")
    _bench_run(here / LAST_RUN_DIR, app, endpoint, batches)
    c = choose_service(None, "app.py", "embed")
    assert c.source == "prior" and why in c.said


def test_the_options_model_is_named_with_its_figures(here):
    run = BenchRun.read(_bench_run(here / "runs" / "a", "app.py"))
    given = ServiceModel.read_batch_times(run.batch_times)
    _bench_run(here / LAST_RUN_DIR, "app.py")        # never overrides what was given
    c = choose_service(given, "app.py", "embed", bench=run)
    assert c.source == "--bench-run" and c.model is given
    assert c.said == f"service model: bench run {run.folder} (its batch_times.json: fit " \
                     "300.0 ms + 40.00 ms/row + 2.00 us/padded token)"
    c = choose_service(given, "app.py", "embed", batch_times=run.batch_times)
    assert c.source == "--batch-times" and str(run.batch_times) in c.said
    flat = ServiceModel.of(0.03, 0.002)
    assert choose_service(flat, "app.py", "embed", service_ms="30").said == \
        "service model: --service-ms 30 (30.0 ms + 2.00 ms/row)"


def test_an_unreadable_last_run_is_an_error_naming_it(here):
    folder = _bench_run(here / LAST_RUN_DIR, "app.py")
    (folder / "batch_times.json").write_text("{")
    with pytest.raises(FloodwayError, match="batch_times.json: cannot read it as JSON.*"
                                            "read as the last bench run's batch times"):
        choose_service(None, "app.py", "embed")


def test_models_are_described_by_their_figures():
    assert describe(ServiceModel.of([0.01, 0.03])) == "2 sampled batch times, mean 20.0 ms"
    assert describe(ServiceModel(ServiceTime(0.001, 0.02), by_rows=((4, 0.03),),
                                 contention=(1.0, 1.3))) == \
        "20.0 ms + 1.00 ms/row; with the times of the batch sizes measured, contention by " \
        "busy containers"
