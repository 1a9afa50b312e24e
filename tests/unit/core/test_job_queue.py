"""The job queues the HTTP layer is written against are complete: it never probes them."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from floodway.core.job_queue import Jobs
from floodway.modal.jobs import ModalJobs


@pytest.mark.parametrize("name", ["submit", "adopt", "find", "get"])
def test_modal_jobs_implement_every_coroutine_of_the_protocol(name):
    ours, theirs = getattr(ModalJobs, name), getattr(Jobs, name)
    assert inspect.iscoroutinefunction(ours)
    assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)


def test_modal_jobs_cannot_adopt_so_they_withdraw_the_work_and_submit():
    submitted = []

    class Recording(ModalJobs):
        async def submit(self, endpoint, inputs, **kw):
            submitted.append((endpoint, inputs, kw))
            return {"id": "fc-1"}, True

    async def go():
        work = asyncio.ensure_future(asyncio.Event().wait())
        jobs = Recording(run_job=None)
        answer = await jobs.adopt("e", ["a"], work, tenant="t", priority=1,
                                  idempotency_key="k")
        await asyncio.sleep(0)
        return answer, work, await jobs.find("e", ["a"], tenant="t", idempotency_key="k")

    answer, work, found = asyncio.run(go())
    assert answer == ({"id": "fc-1"}, True) and work.cancelled() and found is None
    assert submitted == [("e", ["a"], {"tenant": "t", "priority": 1, "idempotency_key": "k"})]
