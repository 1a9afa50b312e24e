"""A fixture app for timing-sensitive end-to-end tests: endpoint `embed` loads the real built
artifacts (so containers really cold-start) but its function is scripted by its inputs:

    "sleep:<ms>"  sleeps that long, then answers     "bad"   raises for that item only
    "hang"        never answers (a stuck container)   other  answers at once
    "log:<tag>:<ms>"  appends "<tag> <time.monotonic()>" to the file named by $TIMED_RUN_LOG
                  as it starts (which items ran, and when), then sleeps <ms>

Each output is [len(text), pid of the container], so tests see which container answered.
"""

import os
import time

import floodway as fw

app = fw.App("timed")
RUN_LOG_ENV = "TIMED_RUN_LOG"


@app.endpoint(
    model=fw.HFModel("sentence-transformers/all-MiniLM-L6-v2",
                     revision="c9745ed1d9f207416be6d2e6f8de32d1f16199bf"),
    build=fw.Build(tensorrt=True),   # as modal_app.py's `embed`, whose build the tests serve
    warm=fw.WarmPool(min_containers=1, scaledown_window_s=2, max_containers=2),
    route=fw.Route(max_inflight_per_container=2, max_queue=32, timeout_s=5.0,
                   stuck_after_s=3.0, tenant_rate_per_s=50, tenant_burst=50),
    batching=fw.Batching(max_batch_rows=4, wait_ms=30),
    cache=False,   # an output names the container that made it: not a function of the input
)
def embed(model, texts: list[str]) -> list[list[int]]:
    out = []
    for t in texts:
        if t == "bad":
            raise ValueError("bad item")
        if t == "hang":
            time.sleep(3600)
        if t.startswith("sleep:"):
            time.sleep(int(t.split(":", 1)[1]) / 1000)
        if t.startswith("log:"):
            _, tag, ms = t.split(":")
            with open(os.environ[RUN_LOG_ENV], "a") as log:
                log.write(f"{tag} {time.monotonic()}\n")
            time.sleep(int(ms) / 1000)
        out.append([len(t), os.getpid()])
    return out
