"""The job state machine: its transition table, and the store held to it under any sequence
of submits, claims, completions, failures, releases, renewals, expiry and purges
(hypothesis state machine)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from floodway.core.clock import ManualClock
from floodway.jobs.job import TRANSITIONS, IllegalTransition, JobState, check_transition
from floodway.jobs.store import JobStore

FINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.EXPIRED}


def test_transitions_table():
    check_transition(JobState.QUEUED, JobState.RUNNING)
    check_transition(JobState.RUNNING, JobState.RUNNING)    # lease taken over
    check_transition(JobState.SUCCEEDED, JobState.EXPIRED)
    for old, new in [(JobState.SUCCEEDED, JobState.RUNNING), (JobState.FAILED, JobState.QUEUED),
                     (JobState.EXPIRED, JobState.QUEUED), (JobState.QUEUED, JobState.EXPIRED)]:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)
    assert TRANSITIONS[JobState.EXPIRED] == frozenset()
    # Finished jobs only expire; an expired one is terminal.
    assert all(TRANSITIONS[s] <= {JobState.EXPIRED} for s in FINAL)


@given(st.sampled_from(JobState), st.sampled_from(JobState))
def test_check_transition_raises_exactly_for_pairs_off_the_table(old, new):
    if new in TRANSITIONS[old]:
        check_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)


OWNERS = st.sampled_from(["a", "b"])
LEASE_S, TTL_S, MAX_ATTEMPTS, MAX_LOST = 3.0, 10.0, 2, 2


class JobLifecycle(RuleBasedStateMachine):
    """A real store on a manual clock. After every step, each job's state is compared with
    the one seen before it: unchanged, or a move the table allows; gone only once expired;
    a success's outputs are the ones its first completion recorded."""

    jobs = Bundle("jobs")

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="jobs-"))
        self.clock = ManualClock()
        self.store = JobStore(self.dir / "jobs.db", ttl_s=TTL_S, max_attempts=MAX_ATTEMPTS,
                              max_lost_attempts=MAX_LOST, clock=self.clock.wall)
        self.seen: dict[str, JobState | None] = {}   # None: purged
        self.results: dict[str, list[int]] = {}      # what the winning completion recorded
        self.tokens = 0

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(target=jobs, owner=st.none() | OWNERS, key=st.none() | st.sampled_from(["k1", "k2"]))
    def submit(self, owner, key):
        job, created = self.store.submit("embed", ["x"], idempotency_key=key, owner=owner,
                                         lease_s=LEASE_S)
        if created:
            assert job.state == (JobState.QUEUED if owner is None else JobState.RUNNING)
            self.seen[job.id] = job.state
        return job.id

    @rule(owner=OWNERS, limit=st.integers(1, 3))
    def claim(self, owner, limit):
        for job in self.store.claim(owner, lease_s=LEASE_S, limit=limit):
            # A claim is no attempt: only work started (or failed) counts.
            assert job.state == JobState.RUNNING and job.started_s is None
            assert 0 <= job.attempts - job.lost < MAX_ATTEMPTS and job.lost < MAX_LOST

    @rule(job_id=jobs, owner=OWNERS)
    def start(self, job_id, owner):
        before = self.store.get(job_id)
        if self.store.start([job_id], owner):
            assert before.state == JobState.RUNNING and before.started_s is None
            assert self.store.get(job_id).attempts == before.attempts + 1

    @rule(job_id=jobs, owner=OWNERS)
    def complete(self, job_id, owner):
        self.tokens += 1
        before = self.store.get(job_id)
        if self.store.complete(job_id, owner, [self.tokens]):
            assert before is not None and before.state in (JobState.QUEUED, JobState.RUNNING)
            assert job_id not in self.results   # a job's result is recorded once
            self.results[job_id] = [self.tokens]

    @rule(job_id=jobs, owner=OWNERS, retry=st.booleans())
    def fail(self, job_id, owner, retry):
        before = self.store.get(job_id)
        if self.store.fail(job_id, owner, "boom", retry=retry):
            assert before is not None and before.state == JobState.RUNNING

    @rule(job_id=jobs, owner=OWNERS)
    def release(self, job_id, owner):
        before = self.store.get(job_id)
        if self.store.release(job_id, owner):
            assert before is not None and before.state == JobState.RUNNING

    @rule(job_id=jobs, owner=OWNERS)
    def renew(self, job_id, owner):
        before = self.store.get(job_id)
        if self.store.renew(job_id, owner, LEASE_S):
            assert before is not None and before.state == JobState.RUNNING

    @rule(seconds=st.sampled_from([0.5, LEASE_S + 0.1, TTL_S + 0.1]))
    def advance(self, seconds):
        self.clock.advance(seconds)

    @rule()
    def purge(self):
        self.store.purge()

    @rule(job_id=jobs, new=st.sampled_from(JobState))
    def a_write_off_the_table_is_refused(self, job_id, new):
        with self.store._write() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or new in TRANSITIONS[JobState(row["state"])]:
            return
        with pytest.raises(IllegalTransition), self.store._write() as db:
            self.store._update(db, row, new)   # rolled back: the invariant sees no change

    @invariant()
    def every_change_follows_the_table(self):
        for job_id, before in self.seen.items():
            job = self.store.get(job_id)
            now = None if job is None else job.state
            if before is None or now is None:
                assert now is None or before is not None   # a purged job stays gone
                assert now is not None or before in (JobState.EXPIRED, None)
            elif now != before:
                check_transition(before, now)
            if before in FINAL:
                assert now in (before, JobState.EXPIRED, None)   # finished stays finished
            if now == JobState.SUCCEEDED:
                assert job.outputs == self.results[job_id]
            if now == JobState.RUNNING:   # the one under way may be counted already
                assert 0 <= job.attempts - job.lost <= MAX_ATTEMPTS and job.lost < MAX_LOST
            if now in FINAL:
                assert job.inputs == []   # dropped when it finished
            self.seen[job_id] = now

    @invariant()
    def stored_bytes_match_the_rows(self):
        # The triggers' per-tenant sums equal the bytes the rows hold, whatever the writes.
        with self.store._write() as db:
            real = db.execute("SELECT coalesce(SUM(length(CAST(inputs AS BLOB)) + coalesce("
                              "length(CAST(outputs AS BLOB)), 0) + coalesce(length(CAST("
                              "error AS BLOB)), 0)), 0) FROM jobs").fetchone()[0]
        assert self.store.stored_bytes()[0] == real


JobLifecycle.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                          deadline=None)
TestJobLifecycle = JobLifecycle.TestCase
