"""The local pool: containers per endpoint, started, replaced and stopped; the local Backend.

Work for an endpoint is split into batches of at most `Batching.max_batch_rows` rows and each
batch goes to the ready container with the most free slots. With no free slot anywhere the
request is answered 503 with Retry-After at once (no unbounded queue). A container that dies
is replaced, with exponential backoff between attempts so a broken build cannot crash-loop
the machine; its in-flight batches are retried once on another container.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from floodway.build.prefetch import THREADS_ENV
from floodway.config import VALIDATED_ENV
from floodway.deploy import NO_MODAL_ENV
from floodway.errors import Unavailable
from floodway.functions.app import App
from floodway.runtime.container import Container, State

log = logging.getLogger("floodway.pool")
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Pool:
    """Local containers for every endpoint of `app`; implements the http `Backend` protocol.

    `containers`: how many to start per endpoint (None: the warm pool's min + buffer, at
    least 1), capped at `WarmPool.max_containers`.
    """

    def __init__(self, app: App, app_spec: str, store_root: str, *,
                 containers: int | None = None):
        self.app, self.app_spec, self.store_root = app, app_spec, store_root
        self.target: dict[str, int] = {}
        for ep in app:
            n = containers if containers is not None else max(
                1, ep.warm.min_containers + ep.warm.buffer_containers)
            self.target[ep.name] = min(n, ep.warm.container_cap)
        total = sum(self.target.values()) or 1
        # Share the cores: each container's ONNX Runtime gets cpu_count / containers threads.
        self.threads = max(1, (os.cpu_count() or 1) // total)
        self.containers: dict[str, list[Container]] = {ep.name: [] for ep in app}
        self._failures: dict[str, int] = {ep.name: 0 for ep in app}
        self._closing = False
        self._tasks: set[asyncio.Task] = set()

    def worker_env(self) -> dict[str, str]:
        """What a container process's environment adds to the router's: this pool's share of
        the cores as ONNX Runtime threads, no Modal objects, and the definition marked as
        already validated (by this process)."""
        return {THREADS_ENV: str(self.threads), NO_MODAL_ENV: "1", VALIDATED_ENV: "1"}

    def _new(self, endpoint: str) -> Container:
        ep = self.app[endpoint]
        c = Container(self.app_spec, endpoint, self.store_root,
                      slots=ep.route.max_inflight_per_container, env=self.worker_env())
        self.containers[endpoint].append(c)
        return c

    async def _run(self, c: Container) -> None:
        """Start a container and replace it whenever it fails, with backoff."""
        await c.start()
        await c.wait_ready()
        if c.state in (State.READY, State.BUSY):
            self._failures[c.endpoint] = 0
            log.info("container %s of %s ready in %.2fs %s", c.id, c.endpoint,
                     c.timings_s.get("total", 0), c.timings_s)
        await c.wait_exit()
        if self._closing or c.state == State.STOPPED:
            return
        n = self._failures[c.endpoint]
        self._failures[c.endpoint] = n + 1
        delay = BACKOFF_S[min(n, len(BACKOFF_S) - 1)]
        log.warning("container %s of %s failed (%s); replacing in %.1fs", c.id, c.endpoint,
                    c.error, delay)
        await asyncio.sleep(delay)
        self.containers[c.endpoint].remove(c)
        if not self._closing:
            self._spawn(self._new(c.endpoint))

    def _spawn(self, c: Container) -> None:
        task = asyncio.create_task(self._run(c))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        for name, n in self.target.items():
            for _ in range(n):
                self._spawn(self._new(name))

    async def wait_ready(self, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            if self.readiness()["ready"]:
                return True
            await asyncio.sleep(0.05)
        return False

    async def stop(self) -> None:
        self._closing = True
        await asyncio.gather(*(c.stop() for cs in self.containers.values() for c in cs),
                             return_exceptions=True)
        for t in list(self._tasks):
            t.cancel()

    # ------------------------------------------------------------------ Backend protocol
    def _pick(self, endpoint: str, exclude: set[int]) -> Container:
        ready = [c for c in self.containers[endpoint]
                 if c.free_slots > 0 and c.id not in exclude]
        if not ready:
            warming = any(c.state in (State.STARTING, State.WARMING)
                          for c in self.containers[endpoint])
            raise Unavailable(f"endpoint {endpoint!r} has no free container slot "
                              f"({'containers are still starting' if warming else 'all busy'})",
                              retry_after_s=1.0)
        return max(ready, key=lambda c: c.free_slots)

    async def _batch(self, endpoint: str, rows: list[Any]) -> list[Any]:
        tried: set[int] = set()
        while True:
            c = self._pick(endpoint, tried)
            try:
                # shield: a caller's timeout must not cancel the reply bookkeeping
                return await asyncio.shield(c.submit(rows))
            except Unavailable:
                tried.add(c.id)
                if len(tried) > 1:
                    raise   # retried once elsewhere already

    async def predict(self, endpoint: str, inputs: list[Any], *, timeout_s: float) -> list[Any]:
        size = self.app[endpoint].batching.max_batch_rows
        chunks = [inputs[i:i + size] for i in range(0, len(inputs), size)]
        free = sum(c.free_slots for c in self.containers[endpoint])
        if len(chunks) > free:
            # Refuse before submitting anything: part of a request is wasted work.
            raise Unavailable(f"endpoint {endpoint!r} has {free} free container slots, this "
                              f"request needs {len(chunks)}", retry_after_s=1.0)
        results = await asyncio.wait_for(
            asyncio.gather(*(self._batch(endpoint, ch) for ch in chunks)), timeout_s)
        return [out for chunk in results for out in chunk]

    def readiness(self) -> dict[str, Any]:
        eps = {name: [c.describe() for c in cs] for name, cs in self.containers.items()}
        ready = all(any(c["state"] in ("ready", "busy") for c in cs) for cs in eps.values())
        return {"ready": ready, "endpoints": eps}
