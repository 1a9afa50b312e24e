"""The container state machine: legal and illegal transitions, the worker's messages as the
container hears them (through a fake process: no spawn, no real clock), and a hypothesis
state machine over random sequences of events."""

from __future__ import annotations

import asyncio
import functools
import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from floodway.errors import Unavailable
from floodway.runtime.container import (
    TRANSITIONS,
    BatchResult,
    Container,
    IllegalTransition,
    State,
)
from floodway.runtime.error_log import ErrorLog
from floodway.runtime.protocol import (
    TO_WORKER,
    Batch,
    BatchDone,
    Chunk,
    Failed,
    ItemError,
    ItemResult,
    Phase,
    Ping,
    Pong,
    Ready,
    decode,
    encode,
    encode_all,
)

TERMINAL = (State.STOPPED, State.FAILED)


def make() -> Container:
    return Container("app.py", "embed", "/nonexistent", slots=2)


def test_a_container_stopped_while_its_process_spawns_kills_that_process():
    # A pool closing right after it started a container (a spill, a replacement) stops it
    # before the process exists; the process must not live on, waiting for work on a pipe.
    import signal

    async def go() -> int | None:
        c = make()
        starting = asyncio.create_task(c.start())
        await c.stop()              # the spawn has not run yet: nothing to drain
        await starting
        assert c.proc is not None
        code = await asyncio.wait_for(c.proc.wait(), 10)
        await c.wait_exit()
        assert c.state == State.STOPPED
        return code

    assert asyncio.run(go()) == -signal.SIGKILL


def test_happy_path_and_history():
    c = make()
    for s in (State.WARMING, State.READY, State.BUSY, State.READY, State.DRAINING, State.STOPPED):
        c._to(s)
    assert [s for _, s in c.history] == [State.STARTING, State.WARMING, State.READY, State.BUSY,
                                         State.READY, State.DRAINING, State.STOPPED]


@pytest.mark.parametrize("path", [
    (State.READY,),                              # starting cannot skip warming... to ready
    (State.WARMING, State.BUSY),
    (State.WARMING, State.READY, State.STOPPED),  # must drain first
    (State.FAILED, State.READY),                  # failed is terminal
])
def test_illegal_transitions_raise(path):
    c = make()
    with pytest.raises(IllegalTransition):
        for s in path:
            c._to(s)


def test_terminal_states_have_no_exit():
    assert TRANSITIONS[State.STOPPED] == frozenset()
    assert TRANSITIONS[State.FAILED] == frozenset()
    assert all(State.FAILED in nxt or s in (State.STOPPED, State.FAILED)
               for s, nxt in TRANSITIONS.items())


def test_free_slots_only_when_serving():
    c = make()
    assert c.free_slots == 0
    c._to(State.WARMING)
    assert c.free_slots == 0
    c._to(State.READY)
    assert c.free_slots == 2


# ---------------------------------------------------------------------- a fake worker process
class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, now_s: float = 100.0):
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class FakeStdin:
    def __init__(self, proc: FakeProc):
        self.proc, self.sent, self.closed = proc, [], False

    def write(self, data: bytes) -> None:
        assert not self.closed, "wrote to a closed stdin"
        self.sent.extend(decode(line, TO_WORKER) for line in data.splitlines(keepends=True))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        self.proc.exit(0)   # a worker ends at the end of its input


class FakeStdout:
    def __init__(self):
        self.lines: asyncio.Queue[bytes] = asyncio.Queue()

    async def readline(self) -> bytes:
        return await self.lines.get()


class FakeProc:
    """What `Container.attach` drives: a worker process played by the test."""

    pid = 4242

    def __init__(self):
        self.stdin, self.stdout = FakeStdin(self), FakeStdout()
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    def say(self, *msgs) -> None:
        """Each message on its own line (or a raw line, as bytes)."""
        for m in msgs:
            self.stdout.lines.put_nowait(m if isinstance(m, bytes) else encode(m))

    def say_together(self, *msgs) -> None:
        """The messages on one line, as the worker sends what it knows at one moment."""
        self.stdout.lines.put_nowait(encode_all(msgs))

    def exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self.stdout.lines.put_nowait(b"")
            self._exited.set()

    def kill(self) -> None:
        self.exit(-9)

    async def wait(self) -> int:
        await self._exited.wait()
        return self.returncode


def aio(test):
    """Run an async test on a fresh event loop (no wall-clock time is waited on)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(test(*args, **kwargs), 10))

    return run


async def settle(rounds: int = 12) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


READY = Ready({"imports": 0.5}, "fake", False, 4242)


async def ready_container(slots: int = 2) -> tuple[Container, FakeProc, Clock]:
    clock = Clock()
    c = Container("app.py", "embed", "/nowhere", slots=slots, clock=clock)
    proc = FakeProc()
    c.attach(proc)
    clock.now_s += 1.5
    proc.say(Phase("warming"), READY)
    await settle()
    assert c.state == State.READY
    return c, proc, clock


@aio
async def test_items_are_heard_as_they_arrive_and_the_batch_resolves_at_done():
    c, proc, clock = await ready_container()
    assert c.timings_s == {"imports": 0.5, "total": 1.5} and c.backend == "fake"
    heard = []
    fut = c.submit([("r1:0", "a"), ("r1:1", "b")], on_item=heard.append)
    assert proc.stdin.sent == [Batch(1, (("r1:0", "a"), ("r1:1", "b")))]
    assert c.inflight_rows == {1: 2} and c.free_slots == 1
    clock.now_s += 0.25
    proc.say(ItemResult(1, "r1:0", [1.0]))
    await settle()
    assert heard == [ItemResult(1, "r1:0", [1.0])] and not fut.done()
    assert c.last_progress_s == clock.now_s   # an item answered is progress
    proc.say(Chunk(1, "r1:1", 0, "x"))
    proc.say_together(ItemError(1, "r1:1", "ValueError: bad"),
                      ItemResult(1, "r1:1", "late duplicate"), BatchDone(1, 0.125, 2))
    clock.now_s += 0.25
    await settle()
    assert heard[1:] == [Chunk(1, "r1:1", 0, "x"), ItemError(1, "r1:1", "ValueError: bad")]
    assert fut.result() == BatchResult({"r1:0": [1.0]}, {"r1:1": "ValueError: bad"}, 2,
                                       0.125, 0.5)
    assert c.inflight == {} and c.inflight_rows == {} and c.idle_since_s == clock.now_s
    assert c.batches_done == 1 and c.state == State.READY


@aio
async def test_the_users_traceback_goes_to_the_log_and_the_caller_gets_the_message(caplog):
    import logging

    caplog.set_level(logging.ERROR, "floodway.endpoint")
    c, proc, _ = await ready_container()
    c.errors = ErrorLog()   # its own: no error logged by another test counts as a repeat
    trace = ('Traceback (most recent call last):\n  File "app.py", line 9, in embed\n'
             "ValueError: bad\n")
    fut = c.submit([("a", 1), ("b", 2)])
    proc.say_together(ItemError(1, "a", "ValueError: bad", trace),
                      ItemError(1, "b", "ValueError: bad", trace), BatchDone(1, 0.1, 2))
    await settle()
    assert fut.result().errors == {"a": "ValueError: bad", "b": "ValueError: bad"}
    (rec,) = caplog.records   # one failure logged once: the batch's second item repeats it
    assert rec.getMessage() == (f"endpoint 'embed', container {c.id}: the function raised:\n"
                                f"{trace.rstrip()}")


@aio
async def test_a_start_that_raised_logs_its_traceback(caplog):
    import logging

    caplog.set_level(logging.ERROR, "floodway.endpoint")
    c = Container("app.py", "embed", "/nowhere", slots=1, clock=Clock(), errors=ErrorLog())
    proc = FakeProc()
    c.attach(proc)
    proc.say(Failed("RuntimeError: no GPU", 'Traceback ...\n  File "app.py", line 3, in load\n'
                                            "RuntimeError: no GPU\n"))
    await settle()
    assert c.state == State.FAILED and c.error == "RuntimeError: no GPU"
    assert 'its start raised:\nTraceback ...\n  File "app.py", line 3' in caplog.text


@aio
async def test_an_exit_once_the_server_is_stopping_is_a_stop_not_a_failure():
    # A SIGTERM to the process group ends a worker as it reaches the router.
    c, proc, _ = await ready_container()
    fut = c.submit([("a", 1)])
    c.expect_stop()
    proc.exit(-15)
    await c.wait_exit()
    assert c.state == State.STOPPED and c.error is None
    with pytest.raises(Unavailable):   # its work in flight still fails over
        fut.result()
    other, proc, _ = await ready_container()
    proc.exit(-15)                     # nothing stopping: a failure
    await other.wait_exit()
    assert other.state == State.FAILED


@aio
async def test_service_time_counts_from_the_previous_answer():
    c, proc, clock = await ready_container()
    first, second = c.submit([("a", 1)]), c.submit([("b", 2)])
    assert c.state == State.BUSY and c.free_slots == 0
    with pytest.raises(Unavailable):
        c.submit([("c", 3)])
    clock.now_s += 1.0
    proc.say_together(ItemResult(1, "a", 1), BatchDone(1, 0.9, 1))
    await settle()
    clock.now_s += 0.5
    proc.say(ItemResult(2, "b", 2), BatchDone(2, 0.4, 1))
    await settle()
    assert (first.result().service_s, second.result().service_s) == (1.0, 0.5)


@aio
async def test_ping_and_pong():
    c, proc, clock = await ready_container()
    assert c.ping() and not c.ping()   # one outstanding at a time
    assert proc.stdin.sent == [Ping()] and c.ping_sent_s == clock.now_s
    clock.now_s += 2.0
    proc.say(Pong())
    await settle()
    assert c.ping_sent_s is None and c.last_pong_s == clock.now_s


@aio
async def test_a_malformed_line_kills_the_process_and_fails_its_work():
    c, proc, _ = await ready_container()
    fut = c.submit([("a", 1)])
    proc.say(b'[{"type": "pong"}, {"type": "item", "batch_id": 1}]\n')
    await settle()
    assert c.state == State.FAILED and proc.returncode == -9
    assert c.error.startswith("protocol error: 'item' message: missing fields")
    with pytest.raises(Unavailable, match="died: protocol error"):
        fut.result()


@aio
async def test_failed_message_fails_in_flight_work_at_once():
    c, proc, _ = await ready_container()
    fut = c.submit([("a", 1)])
    proc.say(Failed("RuntimeError: gone"))
    await settle()
    assert c.state == State.FAILED and c.inflight == {}
    with pytest.raises(Unavailable, match="RuntimeError: gone"):
        fut.result()


@aio
async def test_stop_after_kill_does_not_raise():
    c, proc, _ = await ready_container()
    c.kill("stuck")
    await c.stop(grace_s=1.0)
    assert c.state == State.FAILED and c.error == "stuck"


@aio
async def test_stop_lets_work_finish_then_ends_the_process():
    c, proc, _ = await ready_container()
    fut = c.submit([("a", 1)])
    stopping = asyncio.ensure_future(c.stop(grace_s=60.0))
    await settle()
    assert c.state == State.DRAINING and c.free_slots == 0 and not proc.stdin.closed
    proc.say(ItemResult(1, "a", "A"), BatchDone(1, 0.1, 1))
    await stopping
    assert fut.result().outputs == {"a": "A"} and c.state == State.STOPPED
    assert [s for _, s in c.history][-2:] == [State.DRAINING, State.STOPPED]


@aio
async def test_work_left_when_a_draining_worker_ends_fails_over():
    c, proc, _ = await ready_container()
    fut = c.submit([("a", 1)])
    stopping = asyncio.ensure_future(c.stop(grace_s=60.0))
    await settle()
    proc.exit(0)   # ended without answering
    await stopping
    assert c.state == State.STOPPED and c.inflight == {}
    with pytest.raises(Unavailable, match=r"stopped with work in flight \(exit code 0\)"):
        fut.result()


@aio
async def test_an_unexpected_exit_fails_the_container():
    c, proc, _ = await ready_container()
    fut = c.submit([("a", 1)])
    proc.exit(1)
    await c.wait_exit()
    assert c.state == State.FAILED and c.error == "worker process exited with code 1"
    assert isinstance(fut.exception(), Unavailable)


# ---------------------------------------------------------------------- the state machine
class ContainerMachine(RuleBasedStateMachine):
    """Random sequences of worker messages, submits, kills, stops and process exits, driven
    through the container's real reader on a fake process; checks the transition table."""

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.c = Container("app.py", "embed", "/nowhere", slots=2, clock=self.clock)
        self.proc = FakeProc()
        self.batches: dict[int, tuple[asyncio.Future, list[str]]] = {}
        self.heard: dict[int, list] = {}
        self.terminal: State | None = None
        self.stopping: asyncio.Task | None = None
        self.ids = itertools.count()
        self.run(lambda: self.c.attach(self.proc))

    def run(self, fn):
        async def call():
            out = fn()
            await settle()
            return out

        return self.loop.run_until_complete(call())

    def say(self, *msgs) -> None:
        self.run(lambda: self.proc.say(*msgs))

    def open_batches(self) -> list[int]:
        return [b for b, (fut, _) in self.batches.items() if not fut.done()]

    @initialize(warm=st.booleans(), batches=st.integers(0, 2))
    def begin(self, warm, batches):
        if warm:   # most interesting sequences start from a serving container with work
            self.say(Phase("warming"), READY)
            for _ in range(batches):
                self.submit(1)

    # -------------------------------------------------------------- the worker's messages
    @rule()
    def phase(self):
        self.say(Phase("warming"))

    @rule()
    def ready(self):
        self.say(READY)

    @rule()
    def pong(self):
        self.run(self.c.ping)
        self.say(Pong())

    @rule(garbage=st.booleans())
    def crash(self, garbage):
        self.say(b"[1, 2]\n" if garbage else Failed("RuntimeError: boom"))

    @rule()
    def process_ends(self):
        self.run(lambda: self.proc.exit(0))   # as at the end of its input

    @rule(code=st.sampled_from([1, -9]))
    def process_dies(self, code):
        self.run(lambda: self.proc.exit(code))

    @precondition(lambda self: self.open_batches())
    @rule(data=st.data())
    def item_event(self, data):
        batch_id = data.draw(st.sampled_from(self.open_batches()))
        item = data.draw(st.sampled_from(self.batches[batch_id][1]))
        kind = data.draw(st.sampled_from(["result", "error", "chunk"]))
        self.say({"result": ItemResult(batch_id, item, [0.5]),
                  "error": ItemError(batch_id, item, "ValueError: x"),
                  "chunk": Chunk(batch_id, item, 0, "c")}[kind])

    @precondition(lambda self: self.open_batches())
    @rule(data=st.data())
    def batch_done(self, data):
        batch_id = data.draw(st.sampled_from(self.open_batches()))
        fut, items = self.batches[batch_id]
        alive = self.c.state not in TERMINAL
        self.clock.now_s += 0.5
        done = BatchDone(batch_id, 0.25, len(items))
        if data.draw(st.booleans()):   # the rest of its items on the same line, as a worker
            rest = [ItemResult(batch_id, i, [1.0]) for i in items]   # (repeats are ignored)
            self.run(lambda: self.proc.say_together(*rest, done))
        else:
            self.say(done)
        assert fut.done() or not alive, "BatchDone left its batch unresolved"
        if alive:
            result = fut.result()
            ended = {e.item_id for e in self.heard[batch_id] if not isinstance(e, Chunk)}
            assert set(result.outputs) | set(result.errors) == ended
            assert result.rows == len(items) and result.service_s >= 0
            assert batch_id not in self.c.inflight

    @rule()
    def stray_done(self):
        before = (self.c.state, dict(self.c.inflight_rows))
        self.say(BatchDone(999, 0.25, 1))   # no such batch: ignored
        assert (self.c.state, self.c.inflight_rows) == before

    # -------------------------------------------------------------- the router's side
    @rule(rows=st.integers(1, 3))
    def submit(self, rows):
        items = [(f"r{next(self.ids)}", "x") for _ in range(rows)]
        had_slot, heard = self.c.free_slots > 0, []

        def go():
            try:
                return self.c.submit(items, on_item=heard.append)
            except Unavailable:
                return None

        fut = self.run(go)
        assert (fut is not None) == had_slot
        if fut is not None:
            batch_id = max(self.c.inflight)
            self.batches[batch_id] = (fut, [i for i, _ in items])
            self.heard[batch_id] = heard

    @rule()
    def kill(self):
        self.run(lambda: self.c.kill("stuck"))

    @precondition(lambda self: self.stopping is None)
    @rule()
    def stop(self):
        self.stopping = self.run(lambda: asyncio.ensure_future(self.c.stop(grace_s=3600.0)))

    @rule(to=st.sampled_from(list(State)))
    def illegal_transition(self, to):
        if to in TRANSITIONS[self.c.state]:
            return
        before = (self.c.state, len(self.c.history))
        try:
            self.c._to(to)
        except IllegalTransition:
            pass
        else:
            raise AssertionError(f"{before[0]} -> {to} was allowed")
        assert (self.c.state, len(self.c.history)) == before

    # -------------------------------------------------------------- invariants
    @invariant()
    def only_legal_transitions_happened(self):
        states = [s for _, s in self.c.history]
        assert states[0] == State.STARTING and states[-1] == self.c.state
        assert all(b in TRANSITIONS[a] for a, b in itertools.pairwise(states))

    @invariant()
    def terminal_states_are_terminal(self):
        if self.terminal is not None:
            assert self.c.state == self.terminal
        elif self.c.state in TERMINAL:
            self.terminal = self.c.state

    @invariant()
    def slot_accounting_stays_in_bounds(self):
        c = self.c
        assert 0 <= len(c.inflight) <= c.slots and 0 <= c.free_slots <= c.slots
        assert c.inflight.keys() == c.inflight_rows.keys()
        assert c.inflight.keys() == set(self.open_batches()) or c.state in TERMINAL
        if c.state == State.READY:
            assert len(c.inflight) < c.slots
        if c.state == State.BUSY:
            assert len(c.inflight) == c.slots

    @invariant()
    def work_ends_with_the_container(self):
        if self.c.state in TERMINAL:
            assert not self.c.inflight
            assert not self.open_batches(), "a stopped or failed container left work unresolved"

    @invariant()
    def each_item_ends_once(self):
        for events in self.heard.values():
            ended = [e.item_id for e in events if not isinstance(e, Chunk)]
            assert len(ended) == len(set(ended))

    @invariant()
    def the_reader_never_crashes(self):
        reader = self.c._reader
        assert reader is not None
        assert not reader.done() or reader.exception() is None

    def teardown(self):
        self.run(lambda: self.proc.exit(-9))
        # Bounded: only a broken container would keep these waiting.
        async def ended():
            await self.c.wait_exit()
            if self.stopping is not None:
                await self.stopping

        self.loop.run_until_complete(asyncio.wait_for(ended(), 10))
        assert self.c.state in TERMINAL and not self.c.inflight and not self.open_batches()
        self.loop.close()


ContainerMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestContainerMachine = ContainerMachine.TestCase


@aio
async def test_a_batch_that_cannot_be_encoded_raises_before_it_takes_a_slot():
    c, proc, _ = await ready_container(slots=1)
    with pytest.raises(ValueError):
        c.submit([("r1:0", "ok"), ("r1:1", ["\ud800", "b"])])   # a lone surrogate in a pair
    assert (c.inflight, c.inflight_rows, c._pending) == ({}, {}, {})
    assert c.free_slots == 1 and c.state == State.READY and proc.stdin.sent == []
    fut = c.submit([("r2:0", "fine")])   # the slot is still there for the next batch
    (sent,) = proc.stdin.sent
    proc.say_together(ItemResult(sent.id, "r2:0", "FINE"), BatchDone(sent.id, 0.01, 1))
    await settle()
    assert (await fut).outputs == {"r2:0": "FINE"}


@aio
async def test_a_batcher_on_a_container_serves_on_after_an_input_the_pipe_cannot_carry():
    from floodway.errors import EndpointError
    from floodway.routers.batcher import Batcher

    c, proc, _ = await ready_container(slots=1)
    b = Batcher("embed", max_batch_rows=4, wait_ms=0,
                pick=lambda idle_only: c if c.free_slots > 0 else None)
    c.on_change = b.notify
    b.start()
    deadline = asyncio.get_running_loop().time() + 60

    async def served(request: str, value: str) -> str:
        (fut,) = b.submit(request, [value], deadline_s=deadline)
        await settle()
        sent = proc.stdin.sent[-1]
        proc.say_together(ItemResult(sent.id, f"{request}:0", value.upper()),
                          BatchDone(sent.id, 0.01, 1))
        return await fut

    bad = b.submit("r1", [["\ud800", "b"], "ok"], deadline_s=deadline)
    await settle()
    with pytest.raises(EndpointError, match="r1:0 could not be sent"):
        await bad[0]
    sent = proc.stdin.sent[-1]   # the good item of that request went alone
    assert sent.items == (("r1:1", "ok"),)
    proc.say_together(ItemResult(sent.id, "r1:1", "OK"), BatchDone(sent.id, 0.01, 1))
    assert await bad[1] == "OK"
    assert [await served(f"r{i}", "fine") for i in (2, 3)] == ["FINE", "FINE"]
    assert c.inflight == {} and c.free_slots == 1 and b.queued_rows == 0
    await b.stop()


def test_the_cold_start_is_logged_readably_in_its_phases():
    from floodway.runtime.container import cold_start_text

    timings = {"process_start": 0.051234567891234, "imports": 0.4, "artifact_load": 0.8000001,
               "warmup": 0.1, "total": 1.2345678901234567}
    assert cold_start_text(timings) == ("cold start 1.23 s (process_start 0.05 s, imports "
                                        "0.40 s, artifact_load 0.80 s, warmup 0.10 s)")
    assert cold_start_text({}) == "cold start 0.00 s"
