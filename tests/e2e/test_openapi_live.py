"""The schema fuzz against a live `floodway serve` of modal_app.py (the real MiniLM endpoint
in worker processes, the real job queue): schemathesis loads ``/openapi.json`` over HTTP
and sends every operation seeded cases, valid and invalid, with the same checks as the
in-process fuzz (tests/app/test_openapi_fuzz.py): no 500, and status, content type, body
and headers as the document says. Then the server still serves. Bounded: a few cases per
operation; prints its counts."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import schemathesis
from schemathesis.generation import GenerationMode

from tests.app.test_openapi_fuzz import fuzz

pytestmark = pytest.mark.e2e
EXAMPLES = 10


def test_a_live_router_answers_every_fuzzed_request_as_its_document_says(server):
    schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json")
    schema.validate()
    operations = [op.ok() for op in schema.get_all_operations()]
    counts: Counter = Counter()
    failures: list[str] = []
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(op, mode, EXAMPLES, counts, failures)
    after = httpx.post(f"{server.base}/v1/embed", json={"inputs": ["still here"]}, timeout=30)
    print(f"\nlive router: {len(operations)} operations, {counts['cases']} cases, "
          f"{len(failures)} failures; answers "
          f"{sorted((k, v) for k, v in counts.items() if k != 'cases')}")
    assert not failures, "\n\n".join(failures[:5])
    assert len(operations) >= 10 and counts["cases"] >= 80
    assert counts["POST /v1/embed 200"] > 0 and counts["POST /v1/embed 422"] > 0
    assert after.status_code == 200 and len(after.json()["outputs"][0]) == 384
