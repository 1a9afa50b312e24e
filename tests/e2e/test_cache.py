"""End to end: the response cache of `floodway serve modal_app.py` (real workers, the real
model): a repeated text is answered from the router, keyed by the build its pool serves."""

import pytest

pytestmark = pytest.mark.e2e


def test_a_repeated_text_is_answered_without_a_batch(server):
    rows = 'floodway_batch_rows_sum{endpoint="embed"}'
    first = server.client.post("/v1/embed", json={"inputs": ["cached once", "fresh a"]})
    before = server.metric(rows)
    again = server.client.post("/v1/embed", json={"inputs": ["fresh b", "cached once"]})
    assert first.status_code == again.status_code == 200
    assert again.headers["x-floodway-cache-hits"] == "1"
    assert again.json()["outputs"][1] == first.json()["outputs"][0]
    assert server.metric(rows) == before + 1          # only "fresh b" reached a container
    assert server.metric('floodway_cache_hits_total{endpoint="embed"}') >= 1
