"""The local router's job queue: where its file lives, and that it is a full `Jobs`."""

from __future__ import annotations

import inspect

from floodway.core.job_queue import Jobs
from floodway.jobs.local import JOBS_DB_ENV, LocalJobs, default_jobs_path


def test_each_app_has_its_own_default_job_queue(tmp_path, monkeypatch):
    monkeypatch.delenv(JOBS_DB_ENV, raising=False)
    a, b = default_jobs_path(tmp_path, "app-a"), default_jobs_path(tmp_path, "app b/../x")
    assert a != b and a.parent.parent == b.parent.parent == tmp_path / ".jobs"
    assert b.parent.name == "app_b_.._x"            # no path separators from a name
    monkeypatch.setenv(JOBS_DB_ENV, str(tmp_path / "mine.sqlite3"))
    assert default_jobs_path(tmp_path, "app-a") == tmp_path / "mine.sqlite3"


def test_local_jobs_implement_the_whole_protocol():
    for name in ("submit", "adopt", "find", "get"):
        ours, theirs = getattr(LocalJobs, name), getattr(Jobs, name)
        assert inspect.iscoroutinefunction(ours), name
        assert inspect.signature(ours) == inspect.signature(theirs), name
    assert inspect.signature(LocalJobs.counts) == inspect.signature(Jobs.counts)


# ---------------------------------------------------------------- streaming endpoints

class _StreamBackend:
    """Only what `LocalJobs._decide` reads of a backend: the stream snapshot of one
    container with `active` of its 4 sequences running and `kv_capacity` tokens of KV."""

    def __init__(self, endpoint, *, active: int, kv_capacity: int):
        self.endpoint, self.active, self.kv_capacity = endpoint, active, kv_capacity

    def stream_snapshot(self, name):
        from floodway.core.generation import GenerationModel
        from floodway.core.stream_snapshot import SequenceLoad, build_stream_snapshot

        load = SequenceLoad("1", "ready", active=self.active, max_sequences=4,
                            remaining_tokens=(500,) * self.active,
                            kv_tokens=100 * self.active, kv_capacity=self.kv_capacity)
        return build_stream_snapshot(0.0, self.endpoint, [load], model=GenerationModel(),
                                     cold_start_s=30.0, max_sequences=4,
                                     kv_cache_tokens=self.kv_capacity, max_containers=1)

    def snapshot(self, name):   # the batch path must not be taken for a stream
        raise AssertionError("a streaming endpoint's job was decided with decide()")


def _stream_jobs(tmp_path, **backend):
    import floodway as fw
    app = fw.App("jobs-stream")

    @app.endpoint(generation=fw.Generation(max_sequences=4, max_new_tokens=64))
    async def talk(model, text: str):
        yield text

    jobs = LocalJobs(app, _StreamBackend(app.endpoints["talk"], **backend),
                     tmp_path / "jobs.sqlite3")
    return jobs, jobs.store.submit("talk", ["hello there"], tenant="t", priority="low",
                                   idempotency_key=None)[0]


def test_a_streaming_endpoints_job_is_decided_on_its_sequences(tmp_path):
    from floodway.routers.decide import Action

    jobs, job = _stream_jobs(tmp_path, active=1, kv_capacity=10_000)
    try:
        d = jobs._decide(job)
        assert d.action == Action.DISPATCH, d   # a free sequence slot and KV room
    finally:
        jobs.store.close()


def test_a_job_too_large_for_any_container_fails_at_once(tmp_path):
    import asyncio

    import pytest

    from floodway.errors import RequestError

    jobs, job = _stream_jobs(tmp_path, active=0, kv_capacity=20)   # 64 new tokens never fit
    try:
        with pytest.raises(RequestError) as e:
            asyncio.run(jobs._run(job))
        assert e.value.status == 413
    finally:
        jobs.store.close()


def test_jobs_of_an_endpoint_this_router_does_not_serve_are_named_at_start(tmp_path, caplog):
    import asyncio
    import logging

    jobs, _ = _stream_jobs(tmp_path, active=0, kv_capacity=4096)
    jobs.store.submit("gone", ["a", "b"], tenant="t", priority="low", idempotency_key=None)

    async def go():
        await jobs.start()
        await jobs.stop()

    with caplog.at_level(logging.WARNING, logger="floodway.jobs"):
        asyncio.run(go())
    said = [r.getMessage() for r in caplog.records]
    assert any("'gone'" in m and "2 rows" in m and "does not serve" in m for m in said), said
    assert not any("'talk'" in m for m in said)
