"""A fixture app for the recycling end-to-end test: endpoint `leak` keeps `LEAK_MIB` MiB of
every call in a module-level list (a handler that leaks), and is recycled once its worker
resides in more than `MAX_RSS_MIB` MiB. It has no model: nothing to build but a manifest.

Each output is [pid of the container, its resident MiB right after the call], so a test
sees which container answered and how large it had grown.
"""

import os
import time

import floodway as fw
from floodway.runtime.pool_replace import rss_mib

LEAK_MIB = 8
# A fresh worker of this app resides in about 45 MiB (CPython 3.11, Linux x86-64); a
# container is recycled about 60 MiB of leaks later, after 7 or 8 calls.
MAX_RSS_MIB = 105
WORK_S = 0.15      # each call's work: calls pace themselves like a model's would

_kept: list[bytes] = []
app = fw.App("leaky")


@app.endpoint(
    name="leak",
    warm=fw.WarmPool(min_containers=1, max_containers=2, scaledown_window_s=2),
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
