"""Container recycling (`Recycle`): a container whose worker has grown past a limit is
replaced before the machine kills it; re-exported by `floodway.config`.

A handler, or a library under it, that leaks (a cache that never evicts, a tokenizer's
growing state, fragmentation of the allocator) grows its process with every call until the
operating system's out-of-memory killer ends it, mid-batch, failing every input in flight
(a Kubernetes container past its `resources.limits.memory` is killed the same way:
OOMKilled). Process managers recycle such workers before that: Gunicorn's `max_requests`
("a simple method to help limit the damage of memory leaks") restarts a worker after so
many requests, uWSGI's `reload-on-rss` (MiB) and Celery's `worker_max_memory_per_child`
(KiB; the task running completes, then the worker is replaced) once its resident memory
passes a limit. floodway does both, gracefully: the container takes no new work, its
in-flight work finishes, and a replacement is warmed first whenever the warm pool's floor
needs it (`floodway.runtime.recycle` decides, `floodway.runtime.recycle.Recycler` carries out).
"""

from __future__ import annotations

from dataclasses import dataclass

from floodway.checks import Config as _Config
from floodway.checks import check_int, check_num
from floodway.errors import Problem

# A Python worker with floodway imported resides in tens of MiB before any model: a lower
# limit would recycle every container the moment it served.
MIN_RSS_MIB = 32.0
MAX_RSS_MIB = float(1 << 20)      # 1 TiB
MAX_REQUESTS_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class Recycle(_Config):
    """When a container is recycled (drained and replaced; see the module).

    `max_rss_mib`: the most resident memory (RSS, MiB = 2**20 bytes) its worker process may
    hold; measured by the router every pool tick (0.5 s) from Linux's ``/proc/<pid>/statm``
    (on other systems it is not measured and only `max_requests` applies).
    `max_requests`: the most calls of the endpoint function it may answer: a batch is one
    call however many inputs it holds; a streaming endpoint's sequence is one call.
    None: no such limit; at least one is set. Passed as
    ``@app.endpoint(recycle=fw.Recycle(max_rss_mib=2048))``. A container is marked once
    its memory, or its memory projected over a cold start at its measured growth rate, is
    past `max_rss_mib`, and serves on until its replacement is ready when the floor needs
    one; it can grow past the limit by its growth during that cold start (and the calls
    already sent to it), so set `max_rss_mib` that much growth below where the machine
    would kill it. Local containers only (`floodway serve`); on Modal it has no effect yet.
    """

    max_rss_mib: float | None = None
    max_requests: int | None = None

    def _check(self, out: list[Problem], p: str) -> None:
        if self.max_rss_mib is None and self.max_requests is None:
            out.append(Problem(p, self, "at least one of max_rss_mib, max_requests set"))
        if self.max_rss_mib is not None:
            check_num(out, f"{p}.max_rss_mib", self.max_rss_mib, MIN_RSS_MIB, MAX_RSS_MIB)
        if self.max_requests is not None:
            check_int(out, f"{p}.max_requests", self.max_requests, 1, MAX_REQUESTS_LIMIT)


__all__ = ["MAX_REQUESTS_LIMIT", "MAX_RSS_MIB", "MIN_RSS_MIB", "Recycle"]
