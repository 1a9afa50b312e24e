"""The local router's job queue: where its file lives, and that it is a full `Jobs`."""

from __future__ import annotations

import inspect

from floodway.http.protocols import Jobs
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
