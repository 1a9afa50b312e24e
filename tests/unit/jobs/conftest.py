"""Fixtures the job tests share: a manual clock from a fixed wall time, and a job store on
it in the test's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from floodway.core.clock import ManualClock
from floodway.jobs.store import JobStore

T0 = 1_700_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(wall_s=T0)


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock):
    s = JobStore(tmp_path / "jobs.db", ttl_s=100.0, max_attempts=3, clock=clock.wall)
    yield s
    s.close()
