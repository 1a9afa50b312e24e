"""The pool in process, with real worker processes: readiness, and a failing build."""

import asyncio
import os
import signal
import textwrap
import time

import pytest

import modal_app
from floodway.runtime import health
from floodway.runtime.pool import Pool
from floodway.server import build_server, is_loopback
from tests.conftest import MODAL_APP
from tests.e2e.conftest import PATIENCE_S

pytestmark = pytest.mark.e2e


def test_not_ready_until_a_container_has_warmed_up(built_store):
    async def go():
        pool = Pool(modal_app.endpoints, str(MODAL_APP), str(built_store), containers=1)
        await pool.start()
        first = pool.readiness()
        ok = await pool.wait_ready(60)
        after = pool.readiness()
        (container,) = pool.containers["embed"]
        await pool.stop()
        return first, ok, after, container

    first, ok, after, container = asyncio.run(go())
    assert first["ready"] is False
    assert first["endpoints"]["embed"][0]["state"] == "starting"
    assert ok and after["ready"] is True
    assert after["endpoints"]["embed"][0]["cold_start_s"]["total"] > 0
    assert [str(s) for _, s in container.history] == ["starting", "warming", "ready",
                                                      "draining", "stopped"]


def test_container_that_cannot_load_fails_without_crash_loop(tmp_path, built_store):
    # An endpoint whose function raises at warm-up: containers fail, get replaced with
    # backoff, and the pool never reports ready. Each replacement starts no sooner than the
    # backoff after the failure before it (0.5 s, then 1 s: `health.backoff_s`), read from
    # the containers' own state histories (the pool's clock), however long each start took.
    app_file = tmp_path / "broken_app.py"
    app_file.write_text(textwrap.dedent("""
        import floodway as fw
        app = fw.App("broken")
        @app.endpoint(model=fw.HFModel("org/m", revision="c" * 40), name="embed")
        def embed(model, texts: list[str]) -> list[str]:
            raise RuntimeError("cannot warm up")
    """))
    failed_starts = 3

    async def go():
        from floodway.functions.discover import load_app

        app, _ = load_app(str(app_file))
        pool = Pool(app, str(app_file), str(built_store), containers=1)
        seen: list = []
        await pool.start()
        try:
            end = time.monotonic() + PATIENCE_S
            while pool.endpoints["embed"].failures < failed_starts:
                assert time.monotonic() < end, "timed out waiting for failed starts"
                seen += [c for c in pool.containers["embed"] if c not in seen]
                await asyncio.sleep(0.01)   # each lives for its whole failing start
            detail = pool.readiness()
        finally:
            await pool.stop()
        return detail, pool.endpoints["embed"].failures, seen

    detail, failures, seen = asyncio.run(go())
    assert detail["ready"] is False
    assert failures >= failed_starts   # replaced again and again ...
    gone = [c for c in seen if str(c.history[-1][1]) in ("failed", "stopped")]
    assert len(gone) >= failed_starts - 1, [c.history for c in seen]
    for n, (before, after) in enumerate(zip(gone, seen[1:], strict=False)):
        # ... but not in a tight loop: a start waits out the backoff after the last failure
        waited = after.history[0][0] - before.history[-1][0]
        assert waited >= health.backoff_s(n), (n, waited, before.history, after.history)


def test_a_container_killed_above_the_floor_does_not_block_new_starts(built_store):
    # Floor 1; a second container started for a burst is killed once it served (ready): it
    # is not replaced (above the floor), and it is no failed *start*, so the pool may still
    # start containers when traffic asks for them.
    async def until(pred, what):
        for _ in range(600):
            if pred():
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    async def go():
        pool = Pool(modal_app.endpoints, str(MODAL_APP), str(built_store), containers=1)
        # Room for a second container whatever this machine's cores (a pinned pool spills
        # no further than its cores allow).
        pool.machine_cap = 2
        await pool.start()
        try:
            assert await pool.wait_ready(60)
            assert pool.start_cold("embed")
            ready = lambda: [c for c in pool.containers["embed"]  # noqa: E731
                             if str(c.state) == "ready"]
            await until(lambda: len(ready()) == 2, "two ready containers")
            victim = ready()[-1]
            os.kill(victim.pid, signal.SIGKILL)
            await until(lambda: victim not in pool.containers["embed"], "the killed one gone")
            ep = pool.endpoints["embed"]
            return ep.failures, pool.start_cold("embed"), ep.events
        finally:
            await pool.stop()

    failures, started, events = asyncio.run(go())
    assert failures == 0 and started is True
    assert events["failed"] == 1 and events["start"] == 3


def test_serve_refuses_missing_build_and_non_loopback(tmp_path):
    from floodway.errors import ArtifactError

    with pytest.raises(ArtifactError, match="floodway build"):
        build_server(str(MODAL_APP), store=tmp_path)
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")


def test_worker_reports_an_import_error_and_exits_cleanly(tmp_path, built_store):
    import json
    import os
    import subprocess
    import sys

    app_file = tmp_path / "raises_at_import.py"
    app_file.write_text("raise ImportError('no module named nowhere')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "floodway.runtime.worker", str(app_file), "embed",
         str(built_store)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLOODWAY_NO_MODAL": "1"})
    # exit 1 with a message, not an abort from the prefetch thread still building a session
    assert proc.returncode == 1, proc.stderr
    msg = json.loads(proc.stdout.strip().splitlines()[-1])
    assert msg["type"] == "failed" and msg["error"] == "ImportError: no module named nowhere"
    assert "raises_at_import.py" in msg["traceback"]      # where it was raised, for the log


def test_worker_starts_reliably_with_prefetch(built_store):
    """Repeated cold starts all answer (the prefetch threads once raced numpy's import)."""
    import os
    import subprocess
    import sys

    from floodway.runtime.protocol import (
        FROM_WORKER,
        Batch,
        BatchDone,
        ItemResult,
        Phase,
        Ready,
        decode_all,
        encode,
    )

    env = {**os.environ, "FLOODWAY_NO_MODAL": "1"}
    for _ in range(4):
        proc = subprocess.run(
            [sys.executable, "-m", "floodway.runtime.worker", str(MODAL_APP), "embed",
             str(built_store)], input=encode(Batch(1, (("r1:0", "again"),))),
            capture_output=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        msgs = [m for x in proc.stdout.splitlines() for m in decode_all(x, FROM_WORKER)]
        assert [type(m) for m in msgs] == [Phase, Ready, ItemResult, BatchDone]
        assert msgs[1].torch is False
        item = msgs[2]
        assert item.batch_id == 1 and item.item_id == "r1:0" and len(item.output) == 384
        assert (msgs[3].batch_id, msgs[3].rows) == (1, 1)
