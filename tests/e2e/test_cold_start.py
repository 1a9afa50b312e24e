"""The first request to an endpoint scaled to zero: the router plans with the cold start its
build measured (or an earlier run's starts), not the 30 s prior, so a request whose deadline
a container's start fits is served by the container it starts, not turned into a job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import running_server

pytestmark = pytest.mark.e2e
ZERO_APP = Path(__file__).with_name("zero_app.py")


def test_the_first_request_to_a_scaled_to_zero_endpoint_is_served_not_queued(built_store,
                                                                              tmp_path):
    # 20 s: far beyond a start of this build on a busy machine, below the 30 s prior.
    env = {"FLOODWAY_JOBS_DB": str(tmp_path / "jobs.sqlite3"), "FLOODWAY_ORT_THREADS": "1"}
    with running_server(ZERO_APP, built_store, log=tmp_path / "serve.log", env=env) as srv:
        assert srv.containers() == []
        r = srv.client.post("/v1/embed", json={"inputs": ["hello"]}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0][0] == 5
        assert srv.metric('floodway_spills_total{endpoint="embed",to="cold"}') == 1
