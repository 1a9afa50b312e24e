"""A fixture app for the recycling end-to-end test: endpoint `leak` keeps `LEAK_MIB` MiB of
every call in a module-level list (a handler that leaks), and is recycled once its worker
resides in more than `MAX_RSS_MIB` MiB. It has no model: nothing to build but a manifest.

Each output is [pid of the container, its resident MiB right after the call], so a test
sees which container answered and how large it had grown.

Its leak is steady and bounded in rate: a worker runs one call at a time and each call
takes at least `WORK_S`, so a container grows by at most `LEAK_MIB` per `WORK_S` whatever
the machine (slower on a busy one), in steps small next to what it grows in a pool tick.
`max_containers=1`: one container serves at a time, and a recycle's replacement is the one
container above it while it warms.
"""

import os
import time

import floodway as fw
from floodway.runtime.recycle import rss_mib

LEAK_MIB = 2
# A fresh worker of this app resides in some 45 MiB (CPython 3.11, Linux x86-64): the limit
# leaves it tens of calls, several pool ticks of growth, before its growth is projected
# past the limit.
MAX_RSS_MIB = 140
WORK_S = 0.1       # each call's work: calls pace themselves like a model's would

_kept: list[bytes] = []
app = fw.App("leaky")


@app.endpoint(
    name="leak",
    warm=fw.WarmPool(min_containers=1, max_containers=1, scaledown_window_s=2),
    route=fw.Route(max_inflight_per_container=2, max_queue=64, timeout_s=20.0),
    batching=fw.Batching(max_batch_rows=1, wait_ms=0),
    cache=False,   # every call must reach a container
    recycle=fw.Recycle(max_rss_mib=MAX_RSS_MIB),
)
def leak(model, items: list[str]) -> list[list[float]]:
    _kept.append(b"\x01" * (LEAK_MIB << 20))   # written, so resident
    time.sleep(WORK_S)
    pid = os.getpid()
    return [[pid, rss_mib(pid) or 0.0] for _ in items]
